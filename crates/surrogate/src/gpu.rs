//! The wgpu backend: batched MeanField inference in a compute shader
//! (`crates/surrogate/src/meanfield.wgsl`, which this module alone drives).
//!
//! At construction the predictors' weights, their layer descriptors and every
//! model's local feature table are uploaded once. A call then sends only the
//! state (and, for joint candidates, the joint indices); the shader decodes the
//! mixed-radix digits and gathers the features on the device.
//!
//! Calls block on the device (`Device::poll` with `PollType::wait_indefinitely`):
//! fine in a CLI or a test; async callers must run them in `spawn_blocking`.

use crate::cpu::{check_fields, check_nets};
use crate::features::{STATE_FEATURES, local_len, local_table, push_state};
use crate::net::FoldedNet;
use anyhow::{Context, Result, anyhow, bail};
use bytemuck::{Pod, Zeroable};
use mfsched_core::{GpuState, InSpace, JointSpace, Problem};
use std::fmt;
use std::sync::{Mutex, mpsc};
use wgpu::util::DeviceExt;

const SHADER: &str = include_str!("meanfield.wgsl");
/// `@workgroup_size` in the shader.
const WORKGROUP: u32 = 64;
/// `MAX_WIDTH` in the shader: the widest layer input or output it holds.
const MAX_WIDTH: usize = 64;
/// Radices must stay below 2¹⁶ for the shader's 16-bit-step u64 division.
const MAX_RADIX: usize = 1 << 16;
const MODE_TABLE: u32 = 0;
const MODE_JOINT: u32 = 1;
const MODE_JOINT_FIELDS: u32 = 2;

// Joint indices are uploaded as little-endian (low, high) u32 pairs by casting
// the u64 slice; wgpu's targets are little-endian.
const _: () = assert!(cfg!(target_endian = "little"));

/// `Params` in the shader.
#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
struct Params {
    n_models: u32,
    mode: u32,
    candidates: u32,
    pad: u32,
    state: [f32; 8],
}

/// `ModelDesc` in the shader.
#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
struct ModelDesc {
    first_layer: u32,
    n_layers: u32,
    local_len: u32,
    table_offset: u32,
    radix: u32,
    first_table_row: u32,
    out_offset: f32,
    out_scale: f32,
}

/// `LayerDesc` in the shader (widths in vec4 groups, offsets in vec4).
#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
struct LayerDesc {
    input_groups: u32,
    output_groups: u32,
    weight_offset: u32,
    bias_offset: u32,
}

/// The adapter a backend runs on, as reported by the driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdapterSummary {
    pub name: String,
    pub device_type: wgpu::DeviceType,
    pub backend: wgpu::Backend,
    pub driver: String,
}

impl AdapterSummary {
    pub fn from_info(info: &wgpu::AdapterInfo) -> Self {
        let driver = [info.driver.as_str(), info.driver_info.as_str()]
            .into_iter()
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join(" ");
        Self {
            name: info.name.clone(),
            device_type: info.device_type,
            backend: info.backend,
            driver,
        }
    }

    /// A software rasteriser (lavapipe, llvmpipe, WARP): slower than the CPU backend.
    pub fn is_software(&self) -> bool {
        self.device_type == wgpu::DeviceType::Cpu
    }
}

impl fmt::Display for AdapterSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({:?}, {:?}",
            self.name, self.device_type, self.backend
        )?;
        if !self.driver.is_empty() {
            write!(f, ", {}", self.driver)?;
        }
        f.write_str(")")
    }
}

/// Requests the high-performance adapter of the backends `WGPU_BACKEND` allows
/// (all by default) that runs compute shaders. No adapter is an error (in
/// microseconds, no panic).
pub fn request_adapter() -> Result<wgpu::Adapter> {
    let instance =
        wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
    let adapter = pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions {
        power_preference: wgpu::PowerPreference::HighPerformance,
        ..Default::default()
    }))
    .map_err(|e| anyhow!("{e}"))
    .context(
        "no GPU adapter found (install a driver, or lavapipe: apt-get install \
         mesa-vulkan-drivers libvulkan1; WGPU_BACKEND selects the backends tried)",
    )?;
    let caps = adapter.get_downlevel_capabilities();
    if !caps.flags.contains(wgpu::DownlevelFlags::COMPUTE_SHADERS) {
        bail!(
            "adapter {} has no compute shaders (try WGPU_BACKEND=vulkan)",
            AdapterSummary::from_info(&adapter.get_info())
        );
    }
    Ok(adapter)
}

/// Whether an adapter is available, and which: the capability check GPU tests
/// and commands run before they need one.
pub fn probe_adapter() -> Result<AdapterSummary> {
    Ok(AdapterSummary::from_info(&request_adapter()?.get_info()))
}

/// Buffers a call writes or reads, grown on demand and reused across calls.
#[derive(Debug)]
struct IoBuffers {
    /// Joint indices, `candidate_capacity` u64 values.
    candidates: wgpu::Buffer,
    /// Per-candidate fields, `candidate_capacity` (f32, f32) pairs.
    fields: wgpu::Buffer,
    candidate_capacity: usize,
    /// Shader output and its host-readable copy, `output_capacity` f32 values each.
    outputs: wgpu::Buffer,
    readback: wgpu::Buffer,
    output_capacity: usize,
    bind_group: wgpu::BindGroup,
}

/// Batched MeanField inference on a wgpu device for one problem's models.
#[derive(Debug)]
pub struct GpuBackend {
    problem: Problem,
    space: JointSpace,
    adapter: AdapterSummary,
    device: wgpu::Device,
    queue: wgpu::Queue,
    pipeline: wgpu::ComputePipeline,
    bind_group_layout: wgpu::BindGroupLayout,
    params: wgpu::Buffer,
    models: wgpu::Buffer,
    layers: wgpu::Buffer,
    weights: wgpu::Buffer,
    tables: wgpu::Buffer,
    table_rows: usize,
    /// Most candidates one dispatch takes (buffer binding and workgroup limits).
    max_dispatch_candidates: usize,
    io: Mutex<IoBuffers>,
}

/// The per-model descriptors and the flat parameter and feature arrays the shader reads.
struct Packed {
    models: Vec<ModelDesc>,
    layers: Vec<LayerDesc>,
    weights: Vec<f32>,
    tables: Vec<f32>,
    table_rows: usize,
}

/// Converts an offset or count to the shader's u32, or says what is too large.
fn to_u32(value: usize, what: &str) -> Result<u32> {
    u32::try_from(value).map_err(|_| anyhow!("{what} ({value}) does not fit the shader's u32"))
}

fn pack(problem: &Problem, nets: &[FoldedNet]) -> Result<Packed> {
    check_nets(problem, nets)?;
    let mut packed = Packed {
        models: Vec::new(),
        layers: Vec::new(),
        weights: Vec::new(),
        tables: Vec::new(),
        table_rows: 0,
    };
    for (model, net) in problem.models.iter().zip(nets) {
        if model.grid_size() >= MAX_RADIX {
            bail!(
                "model '{}' has {} local configurations; the GPU backend takes at most {}",
                model.name,
                model.grid_size(),
                MAX_RADIX - 1
            );
        }
        if let Some(l) = net
            .layers
            .iter()
            .find(|l| l.inputs.max(l.outputs) > MAX_WIDTH)
        {
            bail!(
                "predictor of model '{}' has a {}×{} layer; the GPU backend takes layers up to {MAX_WIDTH} wide",
                model.name,
                l.outputs,
                l.inputs
            );
        }
        packed.models.push(ModelDesc {
            first_layer: to_u32(packed.layers.len(), "layer count")?,
            n_layers: to_u32(net.layers.len(), "layer count")?,
            local_len: to_u32(local_len(model), "local feature count")?,
            table_offset: to_u32(packed.tables.len(), "feature table size")?,
            radix: to_u32(model.grid_size(), "grid size")?,
            first_table_row: to_u32(packed.table_rows, "table rows")?,
            out_offset: net.out_offset,
            out_scale: net.out_scale,
        });
        for layer in &net.layers {
            let (input_groups, output_groups) =
                (layer.inputs.div_ceil(4), layer.outputs.div_ceil(4));
            let weight_offset = to_u32(packed.weights.len() / 4, "parameter count")?;
            // Rows padded to whole vec4 groups, then zero rows up to a whole group of outputs.
            for row in layer.weights.chunks_exact(layer.inputs) {
                packed.weights.extend_from_slice(row);
                packed
                    .weights
                    .resize(packed.weights.len() + 4 * input_groups - layer.inputs, 0.0);
            }
            packed.weights.resize(
                packed.weights.len() + 4 * input_groups * (4 * output_groups - layer.outputs),
                0.0,
            );
            let bias_offset = to_u32(packed.weights.len() / 4, "parameter count")?;
            packed.weights.extend_from_slice(&layer.bias);
            packed.weights.resize(
                packed.weights.len() + 4 * output_groups - layer.outputs,
                0.0,
            );
            packed.layers.push(LayerDesc {
                input_groups: to_u32(input_groups, "layer width")?,
                output_groups: to_u32(output_groups, "layer width")?,
                weight_offset,
                bias_offset,
            });
        }
        packed.tables.extend(local_table(model));
        packed.table_rows += model.grid_size();
    }
    to_u32(packed.weights.len(), "parameter count")?;
    to_u32(packed.tables.len(), "feature table size")?;
    Ok(packed)
}

/// Runs `f` with validation and out-of-memory errors captured, so a wgpu error
/// becomes an `Err` instead of the default uncaptured-error panic.
pub fn checked<T>(device: &wgpu::Device, what: &str, f: impl FnOnce() -> T) -> Result<T> {
    let oom = device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
    let validation = device.push_error_scope(wgpu::ErrorFilter::Validation);
    let value = f();
    let validation_error = pollster::block_on(validation.pop());
    let oom_error = pollster::block_on(oom.pop());
    match validation_error.or(oom_error) {
        Some(e) => Err(anyhow!("{what}: {e}")),
        None => Ok(value),
    }
}

fn storage_entry(binding: u32, read_only: bool) -> wgpu::BindGroupLayoutEntry {
    wgpu::BindGroupLayoutEntry {
        binding,
        visibility: wgpu::ShaderStages::COMPUTE,
        ty: wgpu::BindingType::Buffer {
            ty: wgpu::BufferBindingType::Storage { read_only },
            has_dynamic_offset: false,
            min_binding_size: None,
        },
        count: None,
    }
}

impl GpuBackend {
    /// Uploads one predictor per model of `problem` to the high-performance adapter.
    /// Fails (never panics) when there is no adapter or the predictors do not fit.
    pub fn new(problem: &Problem, nets: &[FoldedNet]) -> Result<Self> {
        let packed = pack(problem, nets)?;
        let adapter = request_adapter()?;
        let summary = AdapterSummary::from_info(&adapter.get_info());
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("mfsched meanfield"),
            // The adapter's own limits: the largest buffers and dispatches it allows.
            required_limits: adapter.limits(),
            ..Default::default()
        }))
        .with_context(|| format!("cannot open a device on adapter {summary}"))?;

        let limits = device.limits();
        let n = problem.models.len().max(1);
        let binding_bytes = limits
            .max_storage_buffer_binding_size
            .min(limits.max_buffer_size);
        let max_groups = u64::from(limits.max_compute_workgroups_per_dimension);
        // Rows per model in one dispatch: x and y workgroups (z is the model).
        let max_rows = (max_groups * max_groups * u64::from(WORKGROUP)).min(u64::from(u32::MAX));
        let max_dispatch_candidates = (binding_bytes / (4 * n as u64))
            .min(binding_bytes / 8)
            .min(max_rows)
            .max(1) as usize;
        if n as u64 > max_groups || packed.table_rows as u64 > binding_bytes / 4 {
            bail!(
                "{n} models with {} table rows exceed one dispatch on adapter {summary}",
                packed.table_rows
            );
        }

        let storage = |label: &str, contents: &[u8]| {
            device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some(label),
                contents,
                usage: wgpu::BufferUsages::STORAGE,
            })
        };
        let (pipeline, bind_group_layout, buffers) =
            checked(&device, "cannot build the MeanField pipeline", || {
                let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
                    label: Some("meanfield.wgsl"),
                    source: wgpu::ShaderSource::Wgsl(SHADER.into()),
                });
                let mut entries = vec![wgpu::BindGroupLayoutEntry {
                    binding: 0,
                    visibility: wgpu::ShaderStages::COMPUTE,
                    ty: wgpu::BindingType::Buffer {
                        ty: wgpu::BufferBindingType::Uniform,
                        has_dynamic_offset: false,
                        min_binding_size: None,
                    },
                    count: None,
                }];
                entries.extend((1..=5).map(|b| storage_entry(b, true)));
                entries.push(storage_entry(6, false));
                entries.push(storage_entry(7, true));
                let bind_group_layout =
                    device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
                        label: Some("meanfield bindings"),
                        entries: &entries,
                    });
                let layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
                    label: Some("meanfield layout"),
                    bind_group_layouts: &[Some(&bind_group_layout)],
                    immediate_size: 0,
                });
                let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                    label: Some("meanfield"),
                    layout: Some(&layout),
                    module: &module,
                    entry_point: Some("main"),
                    compilation_options: Default::default(),
                    cache: None,
                });
                let params = device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("meanfield params"),
                    size: size_of::<Params>() as u64,
                    usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                });
                let buffers = [
                    params,
                    storage("meanfield models", bytemuck::cast_slice(&packed.models)),
                    storage("meanfield layers", bytemuck::cast_slice(&packed.layers)),
                    storage("meanfield weights", bytemuck::cast_slice(&packed.weights)),
                    storage("meanfield tables", bytemuck::cast_slice(&packed.tables)),
                ];
                (pipeline, bind_group_layout, buffers)
            })?;
        let [params, models, layers, weights, tables] = buffers;
        let io = Self::io_buffers(
            &device,
            &bind_group_layout,
            [&params, &models, &layers, &weights, &tables],
            1,
            packed.table_rows,
        )?;
        Ok(Self {
            problem: problem.clone(),
            space: problem.space(),
            adapter: summary,
            device,
            queue,
            pipeline,
            bind_group_layout,
            params,
            models,
            layers,
            weights,
            tables,
            table_rows: packed.table_rows,
            max_dispatch_candidates,
            io: Mutex::new(io),
        })
    }

    pub fn adapter(&self) -> &AdapterSummary {
        &self.adapter
    }

    /// Caps the candidates per dispatch below the device limits (larger calls
    /// are split): bounds device memory, and lets tests exercise the split.
    pub fn limit_dispatch_candidates(&mut self, max: usize) {
        self.max_dispatch_candidates = self.max_dispatch_candidates.min(max.max(1));
    }

    /// Every local configuration of every model under `state`: Σᵢ kᵢ values,
    /// model-major, in grid order (the `Predictor::predict_table` layout).
    pub fn predict_table(&self, state: &GpuState) -> Result<Vec<f32>> {
        let mut io = self.lock_io()?;
        let mut out = Vec::with_capacity(self.table_rows);
        let widest_grid = self
            .problem
            .models
            .iter()
            .map(|m| m.grid_size())
            .max()
            .unwrap_or(0);
        self.dispatch(
            &mut io,
            Dispatch {
                mode: MODE_TABLE,
                state,
                candidates: &[],
                fields: &[],
                rows_per_model: widest_grid,
                outputs: self.table_rows,
            },
            &mut out,
        )?;
        Ok(out)
    }

    /// N predictions per joint candidate, row-major: `out[c * N + i]`; an
    /// index outside the joint space is refused ([`InSpace::check`]). The
    /// features are built on the device from the mixed-radix indices.
    pub fn predict_joint(&self, state: &GpuState, candidates: &[u64]) -> Result<Vec<f32>> {
        let candidates = InSpace::check(self.space.size(), candidates)?;
        self.predict_joint_fields(state, candidates, None)
    }

    /// As [`GpuBackend::predict_joint`], with each candidate's own field when
    /// `fields` is given (see `CpuBackend::predict_joint_fields`); the fields
    /// travel beside the indices and the shader puts them in the input rows.
    pub fn predict_joint_fields(
        &self,
        state: &GpuState,
        candidates: InSpace<'_>,
        fields: Option<&[[f32; 2]]>,
    ) -> Result<Vec<f32>> {
        let candidates: &[u64] = &candidates;
        check_fields(candidates, fields)?;
        let n = self.problem.models.len();
        let mut io = self.lock_io()?;
        let mut out = Vec::with_capacity(candidates.len() * n);
        for (k, chunk) in candidates.chunks(self.max_dispatch_candidates).enumerate() {
            let first = k * self.max_dispatch_candidates;
            let (mode, chunk_fields) = match fields {
                Some(f) => (MODE_JOINT_FIELDS, &f[first..first + chunk.len()]),
                None => (MODE_JOINT, &[][..]),
            };
            self.dispatch(
                &mut io,
                Dispatch {
                    mode,
                    state,
                    candidates: chunk,
                    fields: chunk_fields,
                    rows_per_model: chunk.len(),
                    outputs: chunk.len() * n,
                },
                &mut out,
            )?;
        }
        Ok(out)
    }

    fn lock_io(&self) -> Result<std::sync::MutexGuard<'_, IoBuffers>> {
        self.io
            .lock()
            .map_err(|_| anyhow!("a previous GPU call panicked; recreate the GPU backend"))
    }

    fn io_buffers(
        device: &wgpu::Device,
        layout: &wgpu::BindGroupLayout,
        fixed: [&wgpu::Buffer; 5],
        candidate_capacity: usize,
        output_capacity: usize,
    ) -> Result<IoBuffers> {
        checked(device, "cannot allocate the MeanField I/O buffers", || {
            let buffer = |label: &str, size: usize, usage| {
                device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some(label),
                    size: size as u64,
                    usage,
                    mapped_at_creation: false,
                })
            };
            use wgpu::BufferUsages as U;
            let candidates = buffer(
                "meanfield candidates",
                8 * candidate_capacity,
                U::STORAGE | U::COPY_DST,
            );
            let fields = buffer(
                "meanfield fields",
                8 * candidate_capacity,
                U::STORAGE | U::COPY_DST,
            );
            let outputs = buffer(
                "meanfield outputs",
                4 * output_capacity,
                U::STORAGE | U::COPY_SRC,
            );
            let readback = buffer(
                "meanfield readback",
                4 * output_capacity,
                U::MAP_READ | U::COPY_DST,
            );
            let mut entries: Vec<wgpu::BindGroupEntry> = fixed
                .iter()
                .enumerate()
                .map(|(i, b)| wgpu::BindGroupEntry {
                    binding: i as u32,
                    resource: b.as_entire_binding(),
                })
                .collect();
            entries.push(wgpu::BindGroupEntry {
                binding: 5,
                resource: candidates.as_entire_binding(),
            });
            entries.push(wgpu::BindGroupEntry {
                binding: 6,
                resource: outputs.as_entire_binding(),
            });
            entries.push(wgpu::BindGroupEntry {
                binding: 7,
                resource: fields.as_entire_binding(),
            });
            let bind_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some("meanfield bind group"),
                layout,
                entries: &entries,
            });
            IoBuffers {
                candidates,
                fields,
                candidate_capacity,
                outputs,
                readback,
                output_capacity,
                bind_group,
            }
        })
    }

    /// Grows the I/O buffers (and rebinds) when a dispatch needs more room;
    /// growth doubles so a sequence of rising sizes reallocates rarely.
    fn ensure_capacity(&self, io: &mut IoBuffers, candidates: usize, outputs: usize) -> Result<()> {
        if candidates <= io.candidate_capacity && outputs <= io.output_capacity {
            return Ok(());
        }
        let n = self.problem.models.len().max(1);
        let grow = |have: usize, need: usize, cap: usize| {
            need.max(have.saturating_mul(2)).min(cap.max(need))
        };
        let candidate_capacity = grow(
            io.candidate_capacity,
            candidates,
            self.max_dispatch_candidates,
        );
        let output_capacity = grow(
            io.output_capacity,
            outputs,
            (self.max_dispatch_candidates * n).max(self.table_rows),
        );
        *io = Self::io_buffers(
            &self.device,
            &self.bind_group_layout,
            [
                &self.params,
                &self.models,
                &self.layers,
                &self.weights,
                &self.tables,
            ],
            candidate_capacity,
            output_capacity,
        )?;
        Ok(())
    }

    /// One dispatch of `rows_per_model` rows for each model (z = model), which
    /// writes `outputs` values; appends them to `out`.
    fn dispatch(&self, io: &mut IoBuffers, call: Dispatch<'_>, out: &mut Vec<f32>) -> Result<()> {
        let Dispatch {
            mode,
            state,
            candidates,
            fields,
            rows_per_model,
            outputs,
        } = call;
        if outputs == 0 {
            return Ok(());
        }
        self.ensure_capacity(io, candidates.len(), outputs)?;
        let mut state_features = Vec::with_capacity(8);
        push_state(&self.problem, state, &mut state_features);
        debug_assert_eq!(state_features.len(), STATE_FEATURES);
        state_features.resize(8, 0.0);
        let params = Params {
            n_models: self.problem.models.len() as u32,
            mode,
            candidates: candidates.len() as u32,
            pad: 0,
            state: state_features
                .try_into()
                .map_err(|_| anyhow!("state features do not fill the shader's 8 slots"))?,
        };
        let groups = (rows_per_model as u32).div_ceil(WORKGROUP);
        let max_groups = self.device.limits().max_compute_workgroups_per_dimension;
        let groups_x = groups.min(max_groups);
        let groups_y = groups.div_ceil(groups_x);
        let models = self.problem.models.len() as u32;
        let bytes = 4 * outputs as u64;

        checked(&self.device, "MeanField dispatch failed", || {
            self.queue
                .write_buffer(&self.params, 0, bytemuck::bytes_of(&params));
            if !candidates.is_empty() {
                self.queue
                    .write_buffer(&io.candidates, 0, bytemuck::cast_slice(candidates));
            }
            if !fields.is_empty() {
                self.queue
                    .write_buffer(&io.fields, 0, bytemuck::cast_slice(fields));
            }
            let mut encoder = self
                .device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                    label: Some("meanfield"),
                });
            {
                let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                    label: Some("meanfield"),
                    timestamp_writes: None,
                });
                pass.set_pipeline(&self.pipeline);
                pass.set_bind_group(0, &io.bind_group, &[]);
                pass.dispatch_workgroups(groups_x, groups_y, models);
            }
            encoder.copy_buffer_to_buffer(&io.outputs, 0, &io.readback, 0, bytes);
            self.queue.submit([encoder.finish()]);
        })?;

        let slice = io.readback.slice(..bytes);
        let (sender, receiver) = mpsc::channel();
        slice.map_async(wgpu::MapMode::Read, move |r| {
            // The receiver outlives the poll below; a failed send cannot happen.
            let _ = sender.send(r);
        });
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .context("waiting for the GPU failed")?;
        receiver
            .recv()
            .context("the GPU never reported the readback")?
            .context("cannot map the GPU readback buffer")?;
        {
            let view = slice
                .get_mapped_range()
                .context("cannot read the GPU readback buffer")?;
            out.extend(
                view.chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
            );
        }
        io.readback.unmap();
        Ok(())
    }
}

/// What one dispatch computes.
struct Dispatch<'a> {
    mode: u32,
    state: &'a GpuState,
    candidates: &'a [u64],
    /// One per candidate in `MODE_JOINT_FIELDS`, else empty.
    fields: &'a [[f32; 2]],
    rows_per_model: usize,
    outputs: usize,
}

/// Set to `1` (CI does) to make a missing adapter fail GPU tests instead of skipping them.
pub const REQUIRE_ADAPTER_ENV: &str = "MFSCHED_REQUIRE_GPU_ADAPTER";

/// The capability check for GPU tests: `Ok(Ok(adapter))` when one is
/// available; without one, `Err` when [`REQUIRE_ADAPTER_ENV`] is `1`, else
/// `Ok(Err(why))` for the test to say why it skips.
pub fn adapter_gate(test: &str) -> Result<Result<AdapterSummary, String>> {
    adapter_gate_with(test, wgpu::Features::empty())
}

/// [`adapter_gate`] for a test that also needs some of the adapter's optional
/// `features` (a kernel in f16 needs `SHADER_F16`, which a GL adapter such as
/// llvmpipe lacks): an adapter without them is no adapter for the test.
pub fn adapter_gate_with(
    test: &str,
    features: wgpu::Features,
) -> Result<Result<AdapterSummary, String>> {
    let probed = request_adapter().and_then(|adapter| {
        let summary = AdapterSummary::from_info(&adapter.get_info());
        let missing = features - adapter.features();
        if missing.is_empty() {
            Ok(summary)
        } else {
            Err(anyhow!("adapter {summary} lacks {missing:?}"))
        }
    });
    match probed {
        Ok(adapter) => Ok(Ok(adapter)),
        Err(e) if std::env::var(REQUIRE_ADAPTER_ENV).as_deref() == Ok("1") => Err(e.context(
            format!("{test}: {REQUIRE_ADAPTER_ENV}=1 requires a GPU adapter"),
        )),
        Err(e) => Ok(Err(format!("{e:#}"))),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::agreement::{Agreement, TOLERANCE, check_backends, check_states};
    use crate::cpu::CpuBackend;
    use crate::synthetic::{synthetic_nets, synthetic_nets_with};
    use mfsched_core::WorkloadLevel;
    use mfsched_core::load_scenario;
    use mfsched_core::table_offsets;

    pub(crate) fn gate(test: &str) -> bool {
        match adapter_gate(test).expect("GPU adapter required") {
            Ok(_) => true,
            Err(why) => {
                eprintln!("skipping {test}: {why}");
                false
            }
        }
    }

    fn assert_agrees(a: &Agreement, what: &str) {
        assert!(a.rows > 0, "{what}: no rows compared");
        assert!(a.max_normalised <= TOLERANCE, "{what}: {a:?}");
    }

    #[test]
    fn table_and_joint_agree_with_cpu_on_paper_n2() {
        if !gate("table_and_joint_agree_with_cpu_on_paper_n2") {
            return;
        }
        let problem = load_scenario("paper-n2").expect("bundled").problem;
        let nets = synthetic_nets(&problem, 11);
        let all = problem.feasible_indices();
        let check = check_backends(&problem, &nets, &all).expect("both backends run");
        assert_eq!(check.table.rows, 4 * (18 + 9));
        assert_eq!(check.joint.rows, 162 * 2);
        assert_agrees(&check.table, "table");
        assert_agrees(&check.joint, "joint");
    }

    #[test]
    fn paper_n5_subset_agrees_also_when_split_into_many_dispatches() {
        if !gate("paper_n5_subset_agrees_also_when_split_into_many_dispatches") {
            return;
        }
        let problem = load_scenario("paper-n5").expect("bundled").problem;
        let nets = synthetic_nets(&problem, 5);
        // Every 23rd feasible candidate: ~3,400 spread over the whole space.
        let subset: Vec<u64> = problem.feasible_indices().into_iter().step_by(23).collect();
        let cpu = CpuBackend::new(&problem, &nets).expect("cpu");
        let mut gpu = GpuBackend::new(&problem, &nets).expect("an adapter was found");
        let state = check_states(&problem)[WorkloadLevel::Burst.ordinal()];
        let want = cpu.predict_joint(&state, &subset).expect("in range");
        let whole = gpu.predict_joint(&state, &subset).expect("gpu");
        // 1,000 candidates per dispatch: four dispatches, the last one partial,
        // and the I/O buffers regrown between calls of different sizes.
        gpu.limit_dispatch_candidates(1000);
        let split = gpu.predict_joint(&state, &subset).expect("gpu");
        let small = gpu.predict_joint(&state, &subset[..7]).expect("gpu");
        let scale = |r: usize| nets[r % 5].out_scale;
        assert_agrees(
            &Agreement::measure(&want, &whole, scale).expect("same length"),
            "one dispatch",
        );
        assert_eq!(whole, split, "splitting must not change any value");
        assert_eq!(small, whole[..7 * 5]);
        let table = gpu.predict_table(&state).expect("gpu");
        let offsets = table_offsets(&problem);
        assert_agrees(
            &Agreement::measure(&cpu.predict_table(&state), &table, |r| {
                nets[offsets.partition_point(|&o| o <= r) - 1].out_scale
            })
            .expect("same length"),
            "table",
        );
    }

    #[test]
    fn per_candidate_fields_agree_with_cpu_and_split_across_dispatches() {
        if !gate("per_candidate_fields_agree_with_cpu_and_split_across_dispatches") {
            return;
        }
        let problem = load_scenario("paper-n3").expect("bundled").problem;
        let nets = synthetic_nets(&problem, 8);
        let candidates = problem.feasible_indices();
        let checked = InSpace::check(problem.space().size(), &candidates).expect("in range");
        let mut rng = mfsched_rng::Rng::new(17);
        let fields: Vec<[f32; 2]> = candidates
            .iter()
            .map(|_| [rng.next_f64() as f32, rng.next_f64() as f32])
            .collect();
        let state = check_states(&problem)[WorkloadLevel::High.ordinal()];
        let cpu = CpuBackend::new(&problem, &nets).expect("cpu");
        let mut gpu = GpuBackend::new(&problem, &nets).expect("an adapter was found");
        let want = cpu
            .predict_joint_fields(&state, checked, Some(&fields))
            .expect("in range");
        let got = gpu
            .predict_joint_fields(&state, checked, Some(&fields))
            .expect("gpu");
        let scale = |r: usize| nets[r % 3].out_scale;
        assert_agrees(
            &Agreement::measure(&want, &got, scale).expect("same length"),
            "per-candidate fields",
        );
        // Fields really are read: they change the answer.
        let plain = gpu.predict_joint(&state, &candidates).expect("gpu");
        assert_ne!(plain, got);
        // Split into dispatches of 100 candidates, each with its slice of fields.
        gpu.limit_dispatch_candidates(100);
        let split = gpu
            .predict_joint_fields(&state, checked, Some(&fields))
            .expect("gpu");
        assert_eq!(split, got, "splitting must not change any value");
        let err = gpu
            .predict_joint_fields(&state, checked, Some(&fields[1..]))
            .expect_err("one field short");
        assert!(err.to_string().contains("one field per candidate"), "{err}");
    }

    #[test]
    fn layer_widths_that_are_not_multiples_of_four_are_padded_exactly() {
        if !gate("layer_widths_that_are_not_multiples_of_four_are_padded_exactly") {
            return;
        }
        let problem = load_scenario("paper-n3").expect("bundled").problem;
        let state = check_states(&problem)[3];
        for hidden in [&[7, 5][..], &[1][..], &[64, 33, 3][..]] {
            let nets = synthetic_nets_with(&problem, 9, hidden);
            let cpu = CpuBackend::new(&problem, &nets).expect("cpu");
            let gpu = GpuBackend::new(&problem, &nets).expect("an adapter was found");
            let offsets = table_offsets(&problem);
            let a = Agreement::measure(
                &cpu.predict_table(&state),
                &gpu.predict_table(&state).expect("gpu"),
                |r| nets[offsets.partition_point(|&o| o <= r) - 1].out_scale,
            )
            .expect("same length");
            assert_agrees(&a, &format!("hidden {hidden:?}"));
        }
        let too_wide = synthetic_nets_with(&problem, 9, &[65]);
        let err = GpuBackend::new(&problem, &too_wide).expect_err("65 wide");
        assert!(err.to_string().contains("up to 64 wide"), "{err}");
    }

    #[test]
    fn joint_indices_above_two_to_the_32_decode_exactly() {
        if !gate("joint_indices_above_two_to_the_32_decode_exactly") {
            return;
        }
        // Eight 18-configuration LLMs: 18⁸ ≈ 1.1·10¹⁰ joint configurations.
        let mut problem = load_scenario("paper-n5").expect("bundled").problem;
        let llm = problem.models[0].clone();
        problem.models = vec![llm; 8];
        let space = problem.space();
        assert!(space.size() > u64::from(u32::MAX));
        let nets = synthetic_nets(&problem, 3);
        let last = space.size() - 1;
        let candidates = [
            0,
            1,
            17,
            u64::from(u32::MAX),
            u64::from(u32::MAX) + 1,
            1 << 33,
            last - 18,
            last,
        ];
        let state = check_states(&problem)[0];
        let cpu = CpuBackend::new(&problem, &nets).expect("cpu");
        let gpu = GpuBackend::new(&problem, &nets).expect("an adapter was found");
        let a = Agreement::measure(
            &cpu.predict_joint(&state, &candidates).expect("in range"),
            &gpu.predict_joint(&state, &candidates).expect("gpu"),
            |r| nets[r % 8].out_scale,
        )
        .expect("same length");
        assert_agrees(&a, "u64 indices");
        let err = gpu
            .predict_joint(&state, &[space.size()])
            .expect_err("out of range");
        assert!(
            err.to_string().contains("is not a joint configuration"),
            "{err}"
        );
    }
}
