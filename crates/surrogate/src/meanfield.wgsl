// Batched MeanField inference: one invocation evaluates one predictor row,
// y = out_offset + out_scale · σ(W_L · relu(… relu(W_1 x + b_1) …) + b_L).
//
// Owned by host/src/surrogate/gpu.rs, which builds the buffers below; the
// struct layouts here and the #[repr(C)] structs there must stay identical.
//
// The dispatch's z coordinate is the model; x (and y, past the per-dimension
// workgroup limit) count that model's rows. Two modes share one pipeline:
// - TABLE: row r is local configuration r of the model; the output is
//   model-major, outputs[first_table_row + r] (every configuration of every model).
// - JOINT: row r is candidate r of this dispatch; the model's configuration is
//   the mixed-radix digit of the candidate's joint index, decoded here, and the
//   features are gathered from the uploaded local tables and the state, so only
//   indices and the state travel. Output is candidate-major:
//   outputs[r · n_models + model].
// - JOINT_FIELDS: as JOINT, but candidate r brings its own field: fields[r] =
//   (VRAM used / card VRAM, utilisation) replaces the state's last two features
//   (the candidate-aware field of host/src/surrogate/field.rs).
//
// Layers run on vec4 groups: the host pads every layer's inputs and outputs to
// multiples of four with zero weights and biases (a padded output is relu(0) = 0
// and meets zero weights downstream, so padding changes no value). Four lanes per
// access quarter the dynamically indexed private-array traffic, which dominates
// on compilers that lower such arrays to scratch memory or branch ladders. The
// summation order differs from the CPU reference's, so the two agree to
// rounding, not bit for bit.

const WORKGROUP: u32 = 64u;
// Widest layer input or output (in floats) the private arrays hold; the host checks it.
const MAX_WIDTH: u32 = 64u;
const MAX_GROUPS: u32 = MAX_WIDTH / 4u;
const STATE_FEATURES: u32 = 6u;
const MODE_TABLE: u32 = 0u;
const MODE_JOINT_FIELDS: u32 = 2u;

struct Params {
    n_models: u32,
    mode: u32,
    // Candidates in this dispatch (JOINT mode).
    candidates: u32,
    // Keeps `state` at the 16-byte offset uniform arrays need.
    pad: u32,
    // The six state features, padded to two vec4 (uniform arrays need 16-byte strides).
    state: array<vec4<f32>, 2>,
}

struct ModelDesc {
    first_layer: u32,
    n_layers: u32,
    // Local feature count; the state features follow them in the input row.
    local_len: u32,
    // Offset (in f32) of this model's local feature table in `tables`.
    table_offset: u32,
    // Grid size: this model's digit radix in the joint index.
    radix: u32,
    // First row of this model's block in TABLE mode's output.
    first_table_row: u32,
    out_offset: f32,
    out_scale: f32,
}

struct LayerDesc {
    // Padded widths, in vec4 groups.
    input_groups: u32,
    output_groups: u32,
    // Offsets (in vec4) into `weights`: row-major [outputs][input_groups], then
    // output_groups of biases.
    weight_offset: u32,
    bias_offset: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> models: array<ModelDesc>;
@group(0) @binding(2) var<storage, read> layers: array<LayerDesc>;
@group(0) @binding(3) var<storage, read> weights: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read> tables: array<f32>;
// Joint indices as (low word, high word): u64 indices without 64-bit integers.
@group(0) @binding(5) var<storage, read> candidates: array<vec2<u32>>;
@group(0) @binding(6) var<storage, read_write> outputs: array<f32>;
// Per-candidate fields (JOINT_FIELDS mode only; unread otherwise).
@group(0) @binding(7) var<storage, read> fields: array<vec2<f32>>;

struct DivMod {
    quotient: vec2<u32>,
    remainder: u32,
}

// (hi·2³² + lo) / r and % r for 0 < r < 2¹⁶ (the host checks the radices).
// Long division in 16-bit steps: every partial dividend is below r·2¹⁶ < 2³².
fn divmod_u64(n: vec2<u32>, r: u32) -> DivMod {
    let q_hi = n.y / r;
    let t1 = ((n.y % r) << 16u) | (n.x >> 16u);
    let t0 = ((t1 % r) << 16u) | (n.x & 0xffffu);
    return DivMod(vec2<u32>((t1 / r) << 16u | (t0 / r), q_hi), t0 % r);
}

// Model `model`'s local configuration in joint index `index`: the last model
// varies fastest, so divide out the later models' radices, then take the digit.
fn digit(index: vec2<u32>, model: u32) -> u32 {
    var n = index;
    for (var j = params.n_models - 1u; j > model; j = j - 1u) {
        n = divmod_u64(n, models[j].radix).quotient;
    }
    return divmod_u64(n, models[model].radix).remainder;
}

@compute @workgroup_size(64)
fn main(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
) {
    // The model is the dispatch's z coordinate: uniform across the workgroup, so
    // every weight and descriptor address below is uniform too (broadcast loads
    // instead of per-invocation gathers).
    let model = group.z;
    let m = models[model];
    // x and y span this model's rows; y is used when one dimension's workgroup limit is too small.
    let r = gid.y * groups.x * WORKGROUP + gid.x;
    var config = 0u;
    var out_index = 0u;
    if params.mode == MODE_TABLE {
        if r >= m.radix {
            return;
        }
        config = r;
        out_index = m.first_table_row + r;
    } else {
        if r >= params.candidates {
            return;
        }
        config = digit(candidates[r], model);
        out_index = r * params.n_models + model;
    }

    // Input row: [local features of `config` | state features | zero padding].
    var x: array<vec4<f32>, MAX_GROUPS>;
    var y: array<vec4<f32>, MAX_GROUPS>;
    let base = m.table_offset + config * m.local_len;
    for (var k = 0u; k < m.local_len; k = k + 1u) {
        x[k / 4u][k % 4u] = tables[base + k];
    }
    for (var k = 0u; k < STATE_FEATURES; k = k + 1u) {
        let at = m.local_len + k;
        x[at / 4u][at % 4u] = params.state[k / 4u][k % 4u];
    }
    if params.mode == MODE_JOINT_FIELDS {
        let field = fields[r];
        let vram_at = m.local_len + STATE_FEATURES - 2u;
        let util_at = vram_at + 1u;
        x[vram_at / 4u][vram_at % 4u] = field.x;
        x[util_at / 4u][util_at % 4u] = field.y;
    }

    for (var l = 0u; l < m.n_layers; l = l + 1u) {
        let layer = layers[m.first_layer + l];
        let hidden = l + 1u < m.n_layers;
        let n = layer.input_groups;
        for (var o = 0u; o < layer.output_groups; o = o + 1u) {
            // Output neurons 4o … 4o+3: four weight rows of n groups each.
            let row = layer.weight_offset + 4u * o * n;
            var dot4 = vec4<f32>(0.0);
            for (var k = 0u; k < n; k = k + 1u) {
                let xk = x[k];
                dot4 = dot4 + vec4<f32>(
                    dot(weights[row + k], xk),
                    dot(weights[row + n + k], xk),
                    dot(weights[row + 2u * n + k], xk),
                    dot(weights[row + 3u * n + k], xk),
                );
            }
            let z = dot4 + weights[layer.bias_offset + o];
            y[o] = select(z, max(z, vec4<f32>(0.0)), hidden);
        }
        for (var o = 0u; o < layer.output_groups; o = o + 1u) {
            x[o] = y[o];
        }
    }
    let z = x[0].x;

    outputs[out_index] = m.out_offset + m.out_scale * (1.0 / (1.0 + exp(-z)));
}
