//! The proxy's device side: one storage buffer, one compute pipeline of
//! `proxy.wgsl` (beside this file, which alone drives it), one dispatch at a
//! time, each waited for.
//!
//! The adapter is found as the MeanField GPU backend finds it
//! (`Instance::new(InstanceDescriptor::new_without_display_handle_from_env())`,
//! so `WGPU_BACKEND` selects the backends tried; the high-performance adapter).

use anyhow::{Context, Result, bail};
use bytemuck::{Pod, Zeroable};
use mfsched_surrogate::{AdapterSummary, request_adapter, wgpu_checked};
use std::time::Duration;

use super::{Family, Precision};

const SHADER: &str = include_str!("proxy.wgsl");
/// `@workgroup_size` in the shader.
const WORKGROUP: u32 = 64;
/// Bytes of one `memory` item: its working set is `batch` times this.
pub const CHUNK_BYTES: u64 = 1 << 20;
/// vec4 elements of one `compute` item: one workgroup's lanes.
const COMPUTE_ITEM_ELEMENTS: u64 = WORKGROUP as u64;
/// The longest one dispatch may take: past it the device is taken as hung
/// and the proxy fails rather than serve counters that never move.
const DISPATCH_TIMEOUT: Duration = Duration::from_secs(60);

/// `Params` in the shader.
#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
struct Params {
    elements: u32,
    iterations: u32,
    seq: u32,
    pad: u32,
}

/// What one dispatch runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub family: Family,
    pub precision: Precision,
    /// Items per dispatch: `memory` chunks of [`CHUNK_BYTES`], or `compute`
    /// groups of 64 vec4 lanes.
    pub batch: u32,
    /// Most workgroups (of 64 invocations) dispatched; they stride over the buffer.
    pub workgroups: u32,
    /// `compute`: dependent FMA steps per element (16 FMAs each); ignored by `memory`.
    pub iterations: u32,
}

impl Shape {
    /// Bytes of one vec4 of the shape's precision.
    fn vec4_bytes(self) -> u64 {
        match self.precision {
            Precision::F32 => 16,
            Precision::F16 => 8,
        }
    }

    /// The buffer's size: the working set.
    pub fn buffer_bytes(self) -> u64 {
        let per_item = match self.family {
            Family::Memory => CHUNK_BYTES,
            Family::Compute => COMPUTE_ITEM_ELEMENTS * self.vec4_bytes(),
        };
        u64::from(self.batch) * per_item
    }
}

/// The shape's buffer and pipeline on a device, ready to dispatch.
#[derive(Debug)]
pub struct Kernel {
    shape: Shape,
    adapter: AdapterSummary,
    device: wgpu::Device,
    queue: wgpu::Queue,
    pipeline: wgpu::ComputePipeline,
    bind_group: wgpu::BindGroup,
    params: wgpu::Buffer,
    elements: u32,
    groups: u32,
}

/// The WGSL source for `precision`: the element type prepended to `proxy.wgsl`.
fn source(precision: Precision) -> String {
    let prelude = match precision {
        Precision::F32 => "alias scalar = f32;\n",
        Precision::F16 => "enable f16;\nalias scalar = f16;\n",
    };
    format!("{prelude}{SHADER}")
}

impl Kernel {
    /// Opens a device on the high-performance adapter and allocates the
    /// shape's buffer. Fails (never panics) without an adapter, for f16 on an
    /// adapter without `SHADER_F16`, and for a buffer past the adapter's limits.
    pub fn new(shape: Shape) -> Result<Self> {
        if shape.batch == 0 || shape.workgroups == 0 {
            bail!("--batch and --workgroups must be at least 1");
        }
        let adapter = request_adapter()?;
        let line = AdapterSummary::from_info(&adapter.get_info());
        let features = match shape.precision {
            Precision::F32 => wgpu::Features::empty(),
            Precision::F16 if adapter.features().contains(wgpu::Features::SHADER_F16) => {
                wgpu::Features::SHADER_F16
            }
            Precision::F16 => bail!(
                "--precision f16 is not supported on adapter {line}: it lacks SHADER_F16 \
                 (16-bit floats in shaders and storage buffers); use --precision f32"
            ),
        };
        let limits = adapter.limits();
        let bytes = shape.buffer_bytes();
        let largest = limits
            .max_storage_buffer_binding_size
            .min(limits.max_buffer_size);
        if bytes > largest {
            bail!(
                "--batch {} needs a {bytes}-byte buffer; adapter {line} binds at most {largest} bytes",
                shape.batch
            );
        }
        let elements = u32::try_from(bytes / shape.vec4_bytes())
            .context("the buffer holds more elements than the shader's u32 counts")?;
        // Never more workgroups than elements need, nor than one dimension takes.
        let groups = shape
            .workgroups
            .min(elements.div_ceil(WORKGROUP))
            .min(limits.max_compute_workgroups_per_dimension);
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("mfsched gpu-proxy"),
            required_features: features,
            // The adapter's own limits: the largest buffer it binds.
            required_limits: limits,
            ..Default::default()
        }))
        .with_context(|| format!("cannot open a device on adapter {line}"))?;

        let (pipeline, bind_group, params) =
            wgpu_checked(&device, "cannot build the proxy's pipeline", || {
                let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
                    label: Some("proxy.wgsl"),
                    source: wgpu::ShaderSource::Wgsl(source(shape.precision).into()),
                });
                let entry = |binding, ty| wgpu::BindGroupLayoutEntry {
                    binding,
                    visibility: wgpu::ShaderStages::COMPUTE,
                    ty: wgpu::BindingType::Buffer {
                        ty,
                        has_dynamic_offset: false,
                        min_binding_size: None,
                    },
                    count: None,
                };
                let layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
                    label: Some("proxy bindings"),
                    entries: &[
                        entry(0, wgpu::BufferBindingType::Uniform),
                        entry(1, wgpu::BufferBindingType::Storage { read_only: false }),
                    ],
                });
                let pipeline_layout =
                    device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
                        label: Some("proxy layout"),
                        bind_group_layouts: &[Some(&layout)],
                        immediate_size: 0,
                    });
                let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                    label: Some("proxy"),
                    layout: Some(&pipeline_layout),
                    module: &module,
                    entry_point: Some(shape.family.name()),
                    compilation_options: Default::default(),
                    cache: None,
                });
                let params = device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("proxy params"),
                    size: size_of::<Params>() as u64,
                    usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                });
                // wgpu zero-fills a new buffer: the values start bounded.
                let data = device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("proxy data"),
                    size: bytes,
                    usage: wgpu::BufferUsages::STORAGE,
                    mapped_at_creation: false,
                });
                let bind_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
                    label: Some("proxy bind group"),
                    layout: &layout,
                    entries: &[
                        wgpu::BindGroupEntry {
                            binding: 0,
                            resource: params.as_entire_binding(),
                        },
                        wgpu::BindGroupEntry {
                            binding: 1,
                            resource: data.as_entire_binding(),
                        },
                    ],
                });
                (pipeline, bind_group, params)
            })?;
        Ok(Self {
            shape,
            adapter: line,
            device,
            queue,
            pipeline,
            bind_group,
            params,
            elements,
            groups,
        })
    }

    pub fn adapter(&self) -> &AdapterSummary {
        &self.adapter
    }

    /// Workgroups each dispatch runs (`--workgroups`, capped by the work and the device).
    pub fn groups(&self) -> u32 {
        self.groups
    }

    /// One dispatch over the whole buffer, returned once the device finished it.
    pub fn dispatch(&self, seq: u32) -> Result<()> {
        let params = Params {
            elements: self.elements,
            iterations: self.shape.iterations,
            seq,
            pad: 0,
        };
        let submission = wgpu_checked(&self.device, "proxy dispatch failed", || {
            self.queue
                .write_buffer(&self.params, 0, bytemuck::bytes_of(&params));
            let mut encoder = self
                .device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                    label: Some("proxy"),
                });
            {
                let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                    label: Some("proxy"),
                    timestamp_writes: None,
                });
                pass.set_pipeline(&self.pipeline);
                pass.set_bind_group(0, &self.bind_group, &[]);
                pass.dispatch_workgroups(self.groups, 1, 1);
            }
            self.queue.submit([encoder.finish()])
        })?;
        self.device
            .poll(wgpu::PollType::Wait {
                submission_index: Some(submission),
                timeout: Some(DISPATCH_TIMEOUT),
            })
            .with_context(|| {
                format!(
                    "the device did not finish a dispatch within {} s",
                    DISPATCH_TIMEOUT.as_secs()
                )
            })?;
        Ok(())
    }
}
