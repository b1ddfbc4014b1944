//! A lab's runtime backend in Rust: cosim's contract is plain gRPC, so any language
//! with a gRPC stack can time steps for the hub.
//!
//! The model is a small roofline with the lab's own parameters (session options):
//! step = max(FLOPs / (devices x peak x `mfu`), bytes / (devices x bandwidth x `mbu`))
//!        + `overhead_us`, where FLOPs = 2 x params x new tokens + 4 x layers x hidden x
//! new x context, and bytes = weights + KV cache read.
//!
//!     cargo run --release -- --port 50051      # 0 picks a free port and prints it

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use tonic::{transport::Server, Request, Response, Status};

pub mod pb {
    tonic::include_proto!("cosim.v1");
    pub const DESCRIPTORS: &[u8] = tonic::include_file_descriptor_set!("cosim_descriptor");
}

use pb::runtime_backend_service_server::{RuntimeBackendService, RuntimeBackendServiceServer};

/// Per-session constants, computed once at OpenSession.
struct Params {
    flops_per_token: f64,   // 2 x parameters
    attn_flops_per_ctx: f64, // 4 x layers x hidden, per new token per context token
    weight_bytes: f64,
    kv_bytes_per_token: f64,
    flops_per_s: f64,
    bytes_per_s: f64,
    overhead_ns: f64,
}

#[derive(Default)]
struct LabBackend {
    sessions: Mutex<HashMap<String, Params>>,
    next_id: AtomicU64,
}

/// A number from the session options, or `default`.
fn option(spec: &pb::SessionSpec, key: &str, default: f64) -> f64 {
    use prost_types::value::Kind;
    let field = spec.options.as_ref().and_then(|o| o.fields.get(key));
    match field.and_then(|v| v.kind.as_ref()) {
        Some(Kind::NumberValue(x)) => *x,
        _ => default,
    }
}

fn session_params(spec: &pb::SessionSpec) -> Result<Params, Status> {
    let (m, hw) = match (&spec.model, &spec.hardware) {
        (Some(m), Some(hw)) => (m, hw),
        _ => return Err(Status::invalid_argument("spec.model and spec.hardware are required")),
    };
    let tp = spec.parallelism.as_ref().map_or(1, |p| p.tensor.max(1));
    if m.num_attention_heads % tp != 0 {
        return Err(Status::invalid_argument(format!(
            "spec.parallelism.tensor={tp} does not divide num_attention_heads={}",
            m.num_attention_heads
        )));
    }
    if hw.peak_tflops <= 0.0 || hw.mem_bandwidth_gbps <= 0.0 {
        return Err(Status::invalid_argument("spec.hardware.peak_tflops and mem_bandwidth_gbps must be > 0"));
    }
    let (layers, hidden) = (m.num_layers as f64, m.hidden_size as f64);
    let head_dim = if m.head_dim > 0 { m.head_dim } else { m.hidden_size / m.num_attention_heads.max(1) };
    let params = if m.num_params > 0 {
        m.num_params as f64
    } else {
        // attention (q, o, and k, v for the KV heads) + gated MLP + embeddings
        let kv = (m.num_kv_heads * head_dim) as f64;
        layers * (2.0 * hidden * hidden + 2.0 * hidden * kv + 3.0 * hidden * m.intermediate_size as f64)
            + 2.0 * hidden * m.vocab_size as f64
    };
    let devices = tp as f64;
    Ok(Params {
        flops_per_token: 2.0 * params,
        attn_flops_per_ctx: 4.0 * layers * hidden,
        weight_bytes: params * m.bytes_per_param,
        kv_bytes_per_token: 2.0 * layers * (m.num_kv_heads * head_dim) as f64 * m.bytes_per_kv_element,
        flops_per_s: devices * hw.peak_tflops * 1e12 * option(spec, "mfu", 0.5),
        bytes_per_s: devices * hw.mem_bandwidth_gbps * 1e9 * option(spec, "mbu", 0.8),
        overhead_ns: option(spec, "overhead_us", 50.0) * 1e3,
    })
}

fn time_step(p: &Params, index: usize, batch: &pb::StepBatch) -> Result<pb::StepTiming, Status> {
    let (new, ctx) = (&batch.new_tokens, &batch.context_tokens);
    if new.is_empty() || new.len() != ctx.len() {
        return Err(Status::invalid_argument(format!(
            "batches[{index}].context_tokens has {} entries, new_tokens has {} (need the same, > 0)",
            ctx.len(),
            new.len()
        )));
    }
    let (mut flops, mut kv_bytes) = (0.0, 0.0);
    for (&n, &c) in new.iter().zip(ctx) {
        let (n, c) = (n as f64, c as f64);
        flops += p.flops_per_token * n + p.attn_flops_per_ctx * n * (c + n / 2.0);
        kv_bytes += p.kv_bytes_per_token * (c + n);
    }
    let compute_ns = flops / p.flops_per_s * 1e9;
    let memory_ns = (p.weight_bytes + kv_bytes) / p.bytes_per_s * 1e9;
    let duration_ns = compute_ns.max(memory_ns) + p.overhead_ns;
    Ok(pb::StepTiming {
        duration_ns: duration_ns.round() as i64,
        compute_ns: compute_ns.round() as i64,
        memory_ns: memory_ns.round() as i64,
        dispatch_ns: p.overhead_ns.round() as i64,
        ..Default::default()
    })
}

/// Identity of this backend, answered by Describe and OpenSession.
fn backend_info() -> pb::BackendInfo {
    pb::BackendInfo {
        name: "lab-rust-roofline".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        kind: pb::BackendKind::Runtime as i32,
        fidelity: pb::Fidelity::Analytical as i32,
        description: "a lab's roofline in Rust (tonic), options mfu, mbu, overhead_us".into(),
        ..Default::default()
    }
}

#[tonic::async_trait]
impl RuntimeBackendService for LabBackend {
    async fn describe(&self, _: Request<pb::DescribeRequest>) -> Result<Response<pb::DescribeResponse>, Status> {
        Ok(Response::new(pb::DescribeResponse { info: Some(backend_info()) }))
    }

    async fn open_session(
        &self,
        request: Request<pb::OpenSessionRequest>,
    ) -> Result<Response<pb::OpenSessionResponse>, Status> {
        let spec = request.into_inner().spec.unwrap_or_default();
        let params = session_params(&spec)?;
        let id = format!("rs-{}", self.next_id.fetch_add(1, Ordering::Relaxed));
        self.sessions.lock().unwrap().insert(id.clone(), params);
        // Fields the contract adds later (a step_error band, ...) keep their defaults: unset.
        Ok(Response::new(pb::OpenSessionResponse {
            session_id: id,
            info: Some(backend_info()),
            ..Default::default()
        }))
    }

    async fn predict_steps(
        &self,
        request: Request<pb::PredictStepsRequest>,
    ) -> Result<Response<pb::PredictStepsResponse>, Status> {
        let request = request.into_inner();
        let sessions = self.sessions.lock().unwrap();
        let params = sessions
            .get(&request.session_id)
            .ok_or_else(|| Status::not_found(format!("session_id={} is not open", request.session_id)))?;
        let timings = request
            .batches
            .iter()
            .enumerate()
            .map(|(i, b)| time_step(params, i, b))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Response::new(pb::PredictStepsResponse { timings }))
    }

    async fn close_session(
        &self,
        request: Request<pb::CloseSessionRequest>,
    ) -> Result<Response<pb::CloseSessionResponse>, Status> {
        let id = request.into_inner().session_id;
        match self.sessions.lock().unwrap().remove(&id) {
            Some(_) => Ok(Response::new(pb::CloseSessionResponse {})),
            None => Err(Status::not_found(format!("session_id={id} is not open"))),
        }
    }
}

/// `--port N` (0: any free port) and `--host H` from the command line.
fn parse_args() -> Result<(String, u16), String> {
    let (mut host, mut port) = ("127.0.0.1".to_string(), 50051u16);
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let value = args.next().ok_or(format!("{arg} needs a value"))?;
        match arg.as_str() {
            "--port" => port = value.parse().map_err(|e| format!("--port {value}: {e}"))?,
            "--host" => host = value,
            _ => return Err(format!("unknown argument {arg}; usage: --port N [--host H]")),
        }
    }
    Ok((host, port))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (host, port) = parse_args()?;
    let listener = tokio::net::TcpListener::bind((host.as_str(), port)).await?;
    println!("lab-rust-roofline listening on {}", listener.local_addr()?);

    let (mut health, health_service) = tonic_health::server::health_reporter();
    health
        .set_service_status("cosim.v1.RuntimeBackendService", tonic_health::ServingStatus::Serving)
        .await;
    let reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(pb::DESCRIPTORS)
        .build_v1alpha()?;

    // SIGTERM (how the hub stops a `command:` backend) or Ctrl-C ends the server cleanly.
    let shutdown = async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).unwrap();
        tokio::select! { _ = term.recv() => {}, _ = tokio::signal::ctrl_c() => {} }
    };
    Server::builder()
        .add_service(health_service)
        .add_service(reflection)
        .add_service(RuntimeBackendServiceServer::new(LabBackend::default()))
        .serve_with_incoming_shutdown(tokio_stream::wrappers::TcpListenerStream::new(listener), shutdown)
        .await?;
    Ok(())
}
