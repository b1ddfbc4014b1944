//! Packing orders: the order of a scheduler's waiting queue, and which running sequence is preempted.
//!
//! - `fcfs`: arrival order; a preempted sequence goes back first; the newest running is preempted.
//! - `least_work_left`: the fewest prefill and decode tokens left first (ties by arrival).
//! - `priority`: vLLM's priority policy: the request class's priority, lower first, then arrival; the
//!   least important running sequence is preempted (vLLM: `max(running, key=(priority, arrival))`).
//! - `edf`: earliest deadline first (the class's `deadline_s`), preempting the latest deadline.
//!
//! Each order is named in `cosim.hub.config.choices.PACKING` (`clients[].scheduler.packing`).

use pyo3::exceptions::PyValueError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyList;

use crate::sequence::{same, Sequence};

/// Where a sequence waits, and who makes room when KV blocks run out.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Packing {
    Fcfs,
    LeastWorkLeft,
    Priority,
    EarliestDeadline,
}

impl Packing {
    /// The order a config names.
    pub fn named(name: &str) -> PyResult<Packing> {
        Ok(match name {
            "fcfs" => Packing::Fcfs,
            "least_work_left" => Packing::LeastWorkLeft,
            "priority" => Packing::Priority,
            "edf" => Packing::EarliestDeadline,
            _ => return Err(PyValueError::new_err(format!("no packing order {name:?}"))),
        })
    }

    /// The queue is in the order sequences were queued, so one not yet visible to the step being
    /// formed (async scheduling) hides everyone behind it.
    pub fn arrival_order(self) -> bool {
        self == Packing::Fcfs
    }

    /// The (class, arrival) key of the ordered packings: priority or deadline, then admission order.
    fn key(self, py: Python<'_>, seq: &Py<Sequence>) -> PyResult<(i64, i64)> {
        let s = seq.borrow(py);
        let field = if self == Packing::Priority { intern!(py, "priority") } else { intern!(py, "deadline_ns") };
        Ok((s.request.bind(py).getattr(field)?.extract()?, s.order))
    }

    /// `bisect.insort` (after its equals) by [`Packing::key`].
    fn insort(self, py: Python<'_>, waiting: &mut Vec<Py<Sequence>>, seq: Py<Sequence>) -> PyResult<()> {
        let key = self.key(py, &seq)?;
        let (mut low, mut high) = (0, waiting.len());
        while low < high {
            let mid = (low + high) / 2;
            if key < self.key(py, &waiting[mid])? {
                high = mid;
            } else {
                low = mid + 1;
            }
        }
        waiting.insert(low, seq);
        Ok(())
    }

    /// Puts a new sequence in `waiting` (`front`: a branch of a request already running).
    pub fn queue(
        self,
        py: Python<'_>,
        waiting: &mut Vec<Py<Sequence>>,
        seq: Py<Sequence>,
        front: bool,
    ) -> PyResult<()> {
        match self {
            Packing::Fcfs => waiting.insert(if front { 0 } else { waiting.len() }, seq),
            Packing::LeastWorkLeft => {
                waiting.insert(if front { 0 } else { waiting.len() }, seq);
                let mut keyed: Vec<((i64, i64), Py<Sequence>)> = waiting
                    .drain(..)
                    .map(|seq| {
                        let key = {
                            let s = seq.borrow(py);
                            (s.remaining_work(), s.order)
                        };
                        (key, seq)
                    })
                    .collect();
                keyed.sort_by_key(|(key, _)| *key); // stable, as list.sort
                waiting.extend(keyed.into_iter().map(|(_, seq)| seq));
            }
            Packing::Priority | Packing::EarliestDeadline => self.insort(py, waiting, seq)?,
        }
        Ok(())
    }

    /// Puts a preempted sequence back in `waiting`: first, to resume before the others (the
    /// ordered packings: in its place).
    pub fn requeue(self, py: Python<'_>, waiting: &mut Vec<Py<Sequence>>, seq: Py<Sequence>) -> PyResult<()> {
        match self {
            Packing::Fcfs | Packing::LeastWorkLeft => waiting.insert(0, seq),
            Packing::Priority | Packing::EarliestDeadline => self.insort(py, waiting, seq)?,
        }
        Ok(())
    }

    /// The place in `running` (not empty) of the sequence to preempt: the newest, or the least
    /// important (the first of the largest keys, as Python's `max`).
    pub fn victim(self, py: Python<'_>, running: &[Py<Sequence>]) -> PyResult<usize> {
        match self {
            Packing::Fcfs | Packing::LeastWorkLeft => Ok(running.len() - 1),
            Packing::Priority | Packing::EarliestDeadline => {
                let mut best = 0;
                let mut best_key = self.key(py, &running[0])?;
                for (i, seq) in running.iter().enumerate().skip(1) {
                    let key = self.key(py, seq)?;
                    if key > best_key {
                        best = i;
                        best_key = key;
                    }
                }
                Ok(best)
            }
        }
    }
}

/// A packing order by name, on Python lists (for checks; the scheduler uses its own).
#[pyclass(module = "cosim_core", name = "PackingOrder")]
pub struct PyPacking {
    packing: Packing,
}

fn seqs_of(list: &Bound<'_, PyList>) -> PyResult<Vec<Py<Sequence>>> {
    list.iter().map(|item| Ok(item.downcast_into::<Sequence>()?.unbind())).collect()
}

fn write_back(list: &Bound<'_, PyList>, seqs: Vec<Py<Sequence>>) -> PyResult<()> {
    list.del_slice(0, list.len())?;
    for seq in seqs {
        list.append(seq)?;
    }
    Ok(())
}

#[pymethods]
impl PyPacking {
    #[new]
    fn new(name: &str) -> PyResult<Self> {
        Ok(PyPacking { packing: Packing::named(name)? })
    }

    #[getter]
    fn arrival_order(&self) -> bool {
        self.packing.arrival_order()
    }

    /// Puts a new sequence in `waiting` (`front`: a branch of a request already running).
    #[pyo3(signature = (waiting, seq, *, front = false))]
    fn queue(&self, waiting: &Bound<'_, PyList>, seq: &Bound<'_, Sequence>, front: bool) -> PyResult<()> {
        let mut seqs = seqs_of(waiting)?;
        self.packing.queue(seq.py(), &mut seqs, same(seq.py(), seq.as_unbound()), front)?;
        write_back(waiting, seqs)
    }

    /// Puts a preempted sequence back in `waiting`.
    fn requeue(&self, waiting: &Bound<'_, PyList>, seq: &Bound<'_, Sequence>) -> PyResult<()> {
        let mut seqs = seqs_of(waiting)?;
        self.packing.requeue(seq.py(), &mut seqs, same(seq.py(), seq.as_unbound()))?;
        write_back(waiting, seqs)
    }

    /// The running sequence to preempt.
    fn victim(&self, running: &Bound<'_, PyList>) -> PyResult<Py<Sequence>> {
        let seqs = seqs_of(running)?;
        if seqs.is_empty() {
            return Err(PyValueError::new_err("no running sequence to preempt"));
        }
        let i = self.packing.victim(running.py(), &seqs)?;
        Ok(same(running.py(), &seqs[i]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pyo3::types::{PyDict, PyModule};

    /// Sequences of requests with these (priority, deadline) classes, admitted in order.
    fn sequences(py: Python<'_>, classes: &[(i64, i64)]) -> Vec<Py<Sequence>> {
        let namespace = PyModule::import(py, "types").unwrap().getattr("SimpleNamespace").unwrap();
        classes
            .iter()
            .enumerate()
            .map(|(order, &(priority, deadline_ns))| {
                let fields = PyDict::new(py);
                fields.set_item("priority", priority).unwrap();
                fields.set_item("deadline_ns", deadline_ns).unwrap();
                let request = namespace.call((), Some(&fields)).unwrap().unbind();
                let mut seq = Sequence::new(request, py.None(), 10, 0, 1, 0, None, 0, 0);
                seq.order = order as i64;
                Py::new(py, seq).unwrap()
            })
            .collect()
    }

    fn orders(py: Python<'_>, seqs: &[Py<Sequence>]) -> Vec<i64> {
        seqs.iter().map(|seq| seq.borrow(py).order).collect()
    }

    #[test]
    fn ordered_packings_queue_by_class_then_arrival_and_preempt_the_largest() {
        pyo3::prepare_freethreaded_python();
        Python::with_gil(|py| {
            // priorities 1, 0, 1, 0; deadlines 30, 30, 10, 20
            let seqs = sequences(py, &[(1, 30), (0, 30), (1, 10), (0, 20)]);
            let expected = [(Packing::Priority, [1, 3, 0, 2], 2), (Packing::EarliestDeadline, [2, 3, 0, 1], 1)];
            for (packing, queued, victim) in expected {
                let mut waiting = Vec::new();
                for seq in &seqs {
                    packing.queue(py, &mut waiting, seq.clone_ref(py), false).unwrap();
                }
                assert_eq!(orders(py, &waiting), queued, "{packing:?}");
                let running: Vec<Py<Sequence>> = seqs.iter().map(|s| s.clone_ref(py)).collect();
                assert_eq!(packing.victim(py, &running).unwrap(), victim, "{packing:?}");
            }
        });
    }

    #[test]
    fn fcfs_requeues_first_and_preempts_the_newest() {
        pyo3::prepare_freethreaded_python();
        Python::with_gil(|py| {
            let seqs = sequences(py, &[(0, 0), (0, 0), (0, 0)]);
            let mut waiting = Vec::new();
            packing_all(py, Packing::Fcfs, &mut waiting, &seqs[..2]);
            Packing::Fcfs.requeue(py, &mut waiting, seqs[2].clone_ref(py)).unwrap();
            assert_eq!(orders(py, &waiting), [2, 0, 1]);
            assert_eq!(Packing::Fcfs.victim(py, &seqs).unwrap(), 2);
        });
    }

    fn packing_all(py: Python<'_>, packing: Packing, waiting: &mut Vec<Py<Sequence>>, seqs: &[Py<Sequence>]) {
        for seq in seqs {
            packing.queue(py, waiting, seq.clone_ref(py), false).unwrap();
        }
    }
}
