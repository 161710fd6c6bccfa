// The GPU proxy workloads' two kernels, driven by crates/lab/src/gpu_proxy/kernel.rs,
// which prepends the element type: `alias scalar = f32;`, or, on an adapter
// with SHADER_F16, `enable f16; alias scalar = f16;`. One source serves both
// precisions, so the two cannot drift apart.
//
// Both kernels stride over the whole buffer with however many workgroups the
// host dispatched (the `--workgroups` knob): fewer workgroups, fewer lanes in
// flight, the same work. Every value stays bounded (each step is x -> x/2 + c
// with c < 1), so f16 never overflows however many dispatches run.

// Must match `Params` in kernel.rs.
struct Params {
    // vec4 elements in `data`.
    elements: u32,
    // compute: dependent FMA steps per element.
    iterations: u32,
    // The dispatch's sequence number: each dispatch writes other values.
    seq: u32,
    pad: u32,
}

const WORKGROUP: u32 = 64u;

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> data: array<vec4<scalar>>;

// Bandwidth bound: every element read once and written once, one multiply-add
// between. The working set is the whole buffer (batch x the chunk).
@compute @workgroup_size(64)
fn memory(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let stride = groups.x * WORKGROUP;
    let c = vec4<scalar>(scalar(params.seq & 7u) * scalar(0.125));
    for (var i = id.x; i < params.elements; i += stride) {
        data[i] = data[i] * scalar(0.5) + c;
    }
}

// Compute bound: each element loaded once, then `iterations` steps of four
// independent vec4 FMA chains held in registers (16 FMAs a step, enough
// independent work to fill a pipeline), one store.
@compute @workgroup_size(64)
fn compute(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let stride = groups.x * WORKGROUP;
    let m = vec4<scalar>(scalar(0.5));
    let c = vec4<scalar>(scalar(params.seq & 7u) * scalar(0.125));
    for (var i = id.x; i < params.elements; i += stride) {
        var a = data[i];
        var b = a + vec4<scalar>(scalar(0.25));
        var d = a + vec4<scalar>(scalar(0.5));
        var e = a + vec4<scalar>(scalar(0.75));
        for (var n = 0u; n < params.iterations; n++) {
            a = fma(a, m, c);
            b = fma(b, m, c);
            d = fma(d, m, c);
            e = fma(e, m, c);
        }
        data[i] = (a + b + d + e) * scalar(0.25);
    }
}
