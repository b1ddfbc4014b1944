//! What a client records at each step: its row, its energy and its count of inter-token gaps
//! ([`Timeline`], the base of Python's `ClientTimeline` in `hub/sim/records.py`).
//!
//! The step loop ([`crate::stepping`]) writes here natively; the reports read the rows back through
//! Python (`ClientTimeline.columns`, `token_times`, `gap_counts`), once per run. The rows and the gap
//! counts that outgrow memory are written to the tables Python made (`SpillRows`, which own their
//! temporary files), through their buffers ([`RowBuffer`]).

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use rustc_hash::FxHashMap;

use crate::power::StepJoules;
use crate::rows::RowBuffer;

/// One client's step rows, energy and inter-token gaps (see the module docs).
///
/// Args:
///     rows: the step rows' table (`SpillRows`; columns `ClientTimeline.COLUMNS` and `timed_tokens`).
///     spilled_gaps: where gap counts go past `max_gap_keys` distinct gaps (`SpillRows` of
///         `gap_ns`, `tokens`).
///     max_gap_keys: distinct gaps kept in memory before they are spilled.
///
/// Attributes:
///     energy_j: the steps' joules where known.
///     device_s: the device-seconds the steps kept busy.
///     reported_energy_steps: the steps whose backend reported their energy.
///     busy_ns: the time its devices were busy (its steps, or with pipeline micro-batches each step's
///         share of the first stage, which the client adds).
#[pyclass(module = "cosim_core", subclass)]
pub struct Timeline {
    #[pyo3(get, name = "_rows")]
    rows_table: PyObject,
    #[pyo3(get, name = "_spilled_gaps")]
    gaps_table: PyObject,
    rows: Py<RowBuffer>,
    spilled_gaps: Py<RowBuffer>,
    max_gap_keys: usize,
    /// Gap in ns -> tokens, for the gaps not spilled. Their order is nobody's: the reports sort them.
    gaps: FxHashMap<i64, i64>,
    #[pyo3(get)]
    energy_j: f64,
    #[pyo3(get)]
    device_s: f64,
    #[pyo3(get)]
    reported_energy_steps: i64,
    #[pyo3(get, set)]
    pub busy_ns: i64,
}

#[pymethods]
impl Timeline {
    #[new]
    fn new(rows: &Bound<'_, PyAny>, spilled_gaps: &Bound<'_, PyAny>, max_gap_keys: usize) -> PyResult<Self> {
        let py = rows.py();
        let buffer = |table: &Bound<'_, PyAny>| -> PyResult<Py<RowBuffer>> {
            Ok(table.getattr(intern!(py, "_buffer"))?.downcast::<RowBuffer>()?.clone().unbind())
        };
        Ok(Timeline {
            rows: buffer(rows)?,
            spilled_gaps: buffer(spilled_gaps)?,
            rows_table: rows.clone().unbind(),
            gaps_table: spilled_gaps.clone().unbind(),
            max_gap_keys,
            gaps: FxHashMap::default(),
            energy_j: 0.0,
            device_s: 0.0,
            reported_energy_steps: 0,
            busy_ns: 0,
        })
    }

    /// Adds one step's row.
    #[pyo3(signature = (start_ns, end_ns, num_seqs, prefill_tokens, decode_tokens, kv_blocks_used, num_waiting,
                        timed_tokens = 0))]
    #[allow(clippy::too_many_arguments)]
    fn append(
        &mut self,
        py: Python<'_>,
        start_ns: i64,
        end_ns: i64,
        num_seqs: i64,
        prefill_tokens: i64,
        decode_tokens: i64,
        kv_blocks_used: i64,
        num_waiting: i64,
        timed_tokens: i64,
    ) -> PyResult<()> {
        self.push(
            py,
            [start_ns, end_ns, num_seqs, prefill_tokens, decode_tokens, kv_blocks_used, num_waiting, timed_tokens],
        )
    }

    /// Counts one step's energy.
    pub fn add_energy(&mut self, step: &StepJoules) {
        self.device_s += step.device_s;
        if let Some(joules) = step.joules {
            self.energy_j += joules;
            self.reported_energy_steps += i64::from(step.reported);
        }
    }

    /// Counts `tokens` tokens sampled `gap_ns` after their requests' previous ones.
    pub fn count_gap(&mut self, gap_ns: i64, tokens: i64) {
        *self.gaps.entry(gap_ns).or_insert(0) += tokens;
    }

    /// The gap counts not spilled: gap in ns -> tokens (a new dict).
    #[getter]
    fn token_gaps<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let gaps = PyDict::new(py);
        for (gap, tokens) in &self.gaps {
            gaps.set_item(gap, tokens)?;
        }
        Ok(gaps)
    }

    /// Steps recorded.
    fn __len__(&self, py: Python<'_>) -> usize {
        self.rows.borrow(py).__len__()
    }
}

impl Timeline {
    /// Adds one step's row (`append`'s values in order), then spills the gap counts if they
    /// outgrew memory.
    pub fn push(&mut self, py: Python<'_>, row: [i64; 8]) -> PyResult<()> {
        self.rows.borrow_mut(py).push(py, &row)?;
        if self.gaps.len() > self.max_gap_keys {
            // Distinct gaps may grow with the steps: spill them.
            let mut spilled = self.spilled_gaps.borrow_mut(py);
            for (&gap, &tokens) in &self.gaps {
                spilled.push(py, &[gap, tokens])?;
            }
            self.gaps.clear();
        }
        Ok(())
    }
}
