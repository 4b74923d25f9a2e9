"""History mining of CUDA kernels: a repository built in the test, mirrored through tree-sitter."""
from __future__ import annotations

import ast
import shutil

import pytest

from history_repo import git
from skel.miner.history import mine_history
from skel.miner.history_cuda import cuda_module

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is needed to build the repository")

NORM = """#include <cuda_runtime.h>

template <int BLOCK>
__global__ void rmsnorm_kernel(const float* __restrict__ x, const float* w, float* out, int d, float eps) {{
    int row = blockIdx.x;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < d; i += BLOCK) {{
        float v = x[row * d + i];
        ss += v * v;
    }}
    ss = block_sum(ss);
    for (int i = threadIdx.x; i < d; i += BLOCK) {{
        out[row * d + i] = x[row * d + i] {rms} * w[i];
    }}
}}

__global__ void l2norm_kernel(const float* x, float* y, int n) {{
    const int r = blockIdx.x;
    float {acc} = 0.f;
    for (int j = threadIdx.x; j < n; j += blockDim.x) {{ {acc} += x[r * n + j] * x[r * n + j]; }}
    {acc} = block_sum({acc});
    for (int j = threadIdx.x; j < n; j += blockDim.x) {{ y[r * n + j] = x[r * n + j] {l2}; }}
}}
"""
MESSY = """#include <cuda_runtime.h>
// reformatted: other braces, spacing and comments; the same syntax trees
template <int BLOCK>
__global__ void
rmsnorm_kernel(const float* __restrict__ x, const float* w, float* out, int d, float eps)
{{
  int row = blockIdx.x;  // one row per block
  float ss = 0.0f;
  for (int i = threadIdx.x; i < d; i += BLOCK)
  {{
    float v = x[row * d + i];
    ss += (v * v);
  }}
  ss = block_sum(ss);
  for (int i = threadIdx.x; i < d; i += BLOCK)
  {{
    out[row * d + i] = x[row * d + i] {rms} * w[i];
  }}
}}

__global__ void l2norm_kernel(const float* x, float* y, int n)
{{
  const int r = blockIdx.x;
  float {acc} = 0.f;
  for (int j = threadIdx.x; j < n; j += blockDim.x) {acc} += x[r * n + j] * x[r * n + j];
  {acc} = block_sum({acc});
  for (int j = threadIdx.x; j < n; j += blockDim.x) y[r * n + j] = x[r * n + j] {l2};
}}
"""
DIV_RMS, MUL_RMS = "/ sqrtf(ss / d + eps)", "* rsqrtf(ss / d + eps)"
DIV_L2, MUL_L2 = "/ sqrtf(acc + 1e-6f)", "* rsqrtf(acc + 1e-6f)"
STEPS = [
    ("initial CUDA norms", dict(rms=DIV_RMS, l2=DIV_L2, acc="acc"), False),
    ("style: clang-format", dict(rms=DIV_RMS, l2=DIV_L2, acc="acc"), True),
    ("rmsnorm: rsqrtf instead of a division (6% faster)", dict(rms=MUL_RMS, l2=DIV_L2, acc="acc"), True),
    ("refactor: rename the accumulator", dict(rms=MUL_RMS, l2=DIV_L2.replace("acc", "sq"), acc="sq"), True),
    ("l2norm: faster normalisation with rsqrtf", dict(rms=MUL_RMS, l2=MUL_L2.replace("acc", "sq"), acc="sq"), True),
]


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    path = tmp_path_factory.mktemp("cuda")
    git(path, "init", "-q", "-b", "main")
    (path / "csrc").mkdir()
    shas = []
    for n, (message, fill, messy) in enumerate(STEPS):
        (path / "csrc" / "norm.cu").write_text((MESSY if messy else NORM).format(**fill))
        git(path, "add", "-A")
        git(path, "commit", "-q", "-m", message, date=f"2024-02-{n + 1:02d}T12:00:00+00:00")
        shas.append(git(path, "rev-parse", "HEAD").strip())
    return path, shas


def test_the_mirror_writes_cuda_as_python_syntax():
    m = cuda_module(NORM.format(rms=DIV_RMS, l2=DIV_L2, acc="acc"))
    rms, l2 = m.body
    assert [f.name for f in m.body] == ["rmsnorm_kernel", "l2norm_kernel"]
    assert ast.unparse(rms.decorator_list[0]) == "cuda_global" and [a.arg for a in rms.args.args] == \
        ["x", "w", "out", "d", "eps"]
    assert ast.unparse(rms.body[2]) == ("for i in cfor((i := threadIdx.x), i < d, assign(i, i + BLOCK)):\n"
                                        "    v: float = x[row * d + i]\n    ss += v * v")
    assert ast.unparse(rms.body[4].body[0]) == "out[row * d + i] = x[row * d + i] / sqrtf(ss / d + eps) * w[i]"
    assert ast.unparse(l2.body[0]) == "r: const_int = blockIdx.x"
    assert rms.body[4].body[0].lineno == 13  # lines of the file
    assert cuda_module("int host(int a) { return a; }") is None


def test_cuda_history_distils_the_rsqrt_pattern_and_ignores_noise(repo, tmp_path):
    path, shas = repo
    report = mine_history(path, catalog=tmp_path / "c.sqlite")
    # The reformat and the rename are not edits: only the two rsqrtf commits changed a kernel.
    assert report.commits == len(STEPS) and report.kernel_commits == 2 and report.errors == ()
    [cand] = report.candidates
    assert cand.key.splitlines()[0] == "replace: $1 / sqrtf($2) => $1 * rsqrtf($2)"
    assert [e.to_json() for e in cand.refined] == [
        {"kind": "replace", "before": "$1[$2 * $3 + $4] / sqrtf($5 + $6)", "after": "$1[$2 * $3 + $4] * rsqrtf($5 + $6)"}]
    assert [(o.commit, o.path, o.line, o.kernel) for o in cand.occurrences] == [
        (shas[2], "csrc/norm.cu", 17, "rmsnorm_kernel"), (shas[4], "csrc/norm.cu", 27, "l2norm_kernel")]
    assert (cand.kernels, cand.commits, cand.perf_commits) == (2, 2, 2)
    assert [c.id for c in cand.conditions if c.id == "in-jit-function"] == []  # CUDA, not a Triton jit function


def test_cuda_variants_align_and_diff_like_triton(tmp_path):
    """Two trees implementing the same CUDA op differently: the edit between them is distilled."""
    from skel.miner.variants import mine_variants

    (tmp_path / "ref").mkdir()
    (tmp_path / "fork").mkdir()
    (tmp_path / "ref" / "norm.cu").write_text(NORM.format(rms=DIV_RMS, l2=DIV_L2, acc="acc"))
    (tmp_path / "fork" / "norm_fast.cuh").write_text(MESSY.format(rms=MUL_RMS, l2=DIV_L2, acc="acc"))
    report = mine_variants([tmp_path / "ref", tmp_path / "fork"], catalog=tmp_path / "c.sqlite")
    assert report.errors == () or list(report.errors) == []
    keys = [c.key.splitlines()[0] for c in report.candidates]
    assert keys == ["replace: $1 / sqrtf($2) => $1 * rsqrtf($2)"]
    [occ] = report.candidates[0].occurrences
    assert occ.kernel == "rmsnorm_kernel" and occ.message.startswith("variant pair:")


def test_a_cuda_candidate_promotes_as_a_cuda_skeleton(repo, tmp_path):
    from skel.skeletons.promote import render
    from skel.commands.catalog_preview import engine_problem
    from skel.catalog.store import open_catalog

    path, _ = repo
    db = tmp_path / "c.sqlite"
    mine_history(path, catalog=db)
    with open_catalog(db) as cat:
        [cand] = cat.candidates()
    files = dict(render(cand, "SK099", tmp_path).files)
    assert engine_problem(cand) == "mined from CUDA files: `skel apply` rewrites Triton files only"
    assert 'targets = ["cuda"]' in files["skeleton.toml"].splitlines()
    assert "import triton" not in files["examples/before.py"] and "CUDA, written in the Python syntax" in files["examples/before.py"]
    assert "h1[h2 * h3 + h4] / sqrtf(h5 + h6)" in files["examples/before.py"]
    assert "h1[h2 * h3 + h4] * rsqrtf(h5 + h6)" in files["examples/after.py"]
    ast.parse(files["examples/before.py"]), ast.parse(files["examples/after.py"])


def test_the_mirror_covers_pointers_casts_branches_and_keeps_the_rest_opaque():
    src = """
namespace ops {
template <typename T>
__device__ __forceinline__ T clamp01(T x) { return x < T(0) ? T(0) : (x > T(1) ? T(1) : x); }

__global__ void scale(float* __restrict__ out, const half* in, int n, float s, bool in_place) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = __half2float(in[i]);
    *out = (float)v * s;
    out->x = static_cast<float>(v);
    do { v *= 0.5f; } while (v > 1.0f && !in_place);
    auto f = [&](int k) { return k + 1; };
    asm volatile("membar.gl;");
    out[i] = std::max(clamp01<float>(v), 0x10 ? 1e-3f : -2.5e+2f);
}
}  // namespace ops
"""
    m = cuda_module(src)
    clamp, scale = m.body
    assert (clamp.name, ast.unparse(clamp.decorator_list[0])) == ("clamp01", "cuda_device")
    assert ast.unparse(clamp.body[0]) == "return T(0) if x < T(0) else T(1) if x > T(1) else x"
    lines = ast.unparse(scale).splitlines()
    assert lines[0:2] == ["@cuda_global", "def scale(out, in_, n, s, in_place):"]  # `in` is a Python keyword
    assert lines[2:] == [
        "    i: int = blockIdx.x * blockDim.x + threadIdx.x",
        "    if i >= n:",
        "        return",
        "    v: float = __half2float(in_[i])",
        "    out[0] = cast_float(v) * s",
        "    out.x = static_cast[float](v)",
        "    while do_while(v > 1.0 and (not in_place)):",
        "        v *= 0.5",
        "    f: auto = cexpr('[&](int k) { return k + 1; }')",
        "    cexpr('asm volatile(\"membar.gl;\")')",
        "    out[i] = std.max(clamp01[float](v), 0.001 if 16 else -250.0)",
    ]
    assert scale.body[0].lineno == 7 and scale.lineno == 6
