//! The roofline backend's step-time model (issue #37: "the step-time formula in the compiled
//! core"): BestServe's adapted roofline or the fitted kernel model per operator, TP/EP/PP
//! collectives, and Algorithm 1's overlap of host dispatch with the device.
//!
//! The Python modules of `adapters/roofline` keep the model's documentation and sources and
//! its configuration (parameters, shape, device), handed once per session to a
//! [`py::RooflineModel`]; they re-export what they need of this. The floats are those of the
//! Python model this replaced: the same operations in the same order.
//!
//! [`stats`] sums a batch, [`operators`] lists each operator's work and traffic, [`kernels`]
//! times a kernel by the fitted model, [`collectives`] the collectives, [`estimator`] a step;
//! [`cache`] keeps the backend's timings.

pub mod cache;
pub mod collectives;
pub mod config;
pub mod estimator;
pub mod kernels;
pub mod operators;
pub mod py;
pub mod stats;
