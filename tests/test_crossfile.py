"""Cross-file and member-call attribution of CUDA helper findings (miner/crossfile.py), on small
sources written for these tests: a header with a state struct whose ``merge`` is an LSE merge, a
header of runners bound through a kernel's type template parameter, a kernel file that includes
the first, and an unrelated header (not included) with a same-named ``merge`` that must not count."""
from __future__ import annotations

from skel.catalog.records import Finding
from skel.miner.crossfile import SourceFile, attribute, own_findings

STATE = """\
#pragma once
template <int N>
struct state_t {
  float o[N];
  float m;
  float d;
  __device__ void merge(const float* other_o, float other_m, float other_d) {
    float m_prev = m;
    m = max(m_prev, other_m);
    float f1 = exp2f(m_prev - m);
    float f2 = exp2f(other_m - m);
    d = d * f1 + other_d * f2;
    for (int i = 0; i < N; ++i) {
      o[i] = o[i] * f1 + other_o[i] * f2;
    }
  }
};
"""

OTHER = """\
struct counter_t {
  float total;
  __device__ void merge(float x) { total += expf(x); }
};
"""

KERNEL = """\
#include "state.cuh"

__global__ void MergeKernel(const float* V, const float* S, float* out, int n) {
  state_t<4> st;
  for (int it = 0; it < n; ++it) {
    float s = S[it];
    st.merge(V + it * 4, s, 1.f);
  }
  out[threadIdx.x] = st.o[0];
}

template <class Runner, class Reducer>
__global__ void PersistentKernel(const float* V, const float* S, float* out, int n) {
  Runner::Run(V, out);
  Reducer::Run(V, S, out, n);
}
"""

RUNNERS = """\
#include "kernel.cu"
#include "state.cuh"

struct Attention {
  static __device__ void Run(const float* V, float* out) { out[0] = V[0]; }
};

struct Reduction {
  static __device__ void Run(const float* V, const float* S, float* out, int n) {
    state_t<4> st;
    for (int it = 0; it < n; ++it) {
      st.merge(V + it * 4, S[it], 1.f);
    }
    out[0] = st.o[0];
  }
};

void launch() {
  auto k = PersistentKernel<Attention, Reduction>;
}
"""

UNRELATED = """\
#include "state.cuh"

__global__ void CountKernel(const float* x, float* out, int n) {
  counter_t c;
  c.merge(x[threadIdx.x]);
  out[0] = c.total;
}
"""


def _helper(path: str, kernel: str, line: int, code: str = "SK012") -> Finding:
    return Finding(code, "instance", path, line, line, kernel, (("merge", "f2 = exp2f(other_m - m)"),))


def _run(with_runners: bool = True) -> dict[str, list[Finding]]:
    files = [
        SourceFile("lib/state.cuh", STATE, (_helper("lib/state.cuh", "state_t::merge", 11),)),
        SourceFile("lib/other.cuh", OTHER, (_helper("lib/other.cuh", "counter_t::merge", 3, "SK004"),)),
        SourceFile("lib/kernel.cu", KERNEL, ()),
        SourceFile("lib/unrelated.cu", UNRELATED, ()),
    ]
    if with_runners:
        files.append(SourceFile("lib/runners.cuh", RUNNERS, ()))
    return attribute(files)


def test_member_call_into_an_included_header_is_attributed_at_the_call_site():
    found = [f for f in _run()["lib/kernel.cu"] if f.kernel == "MergeKernel"]
    assert [(f.skeleton, f.kind, f.line) for f in found] == [("SK012", "instance", 7)]
    params = dict(found[0].params)
    assert params["via"] == "state_t::merge"
    assert params["helper_line"] == 11
    assert params["helper_file"] == "lib/state.cuh"


def test_static_call_through_a_template_parameter_bound_where_the_kernel_is_instantiated():
    found = [f for f in _run()["lib/kernel.cu"] if f.kernel == "PersistentKernel"]
    assert [(f.skeleton, f.line) for f in found] == [("SK012", 15)]
    assert dict(found[0].params)["via"] == "Reduction::Run -> state_t::merge"
    # without the file that instantiates it, the parameter binds nothing
    assert not [f for f in _run(with_runners=False).get("lib/kernel.cu", []) if f.kernel == "PersistentKernel"]


def test_same_named_method_in_a_header_that_is_not_included_is_not_attributed():
    out = _run()
    # c is a counter_t, whose merge is in other.cuh, which unrelated.cu does not include; the one merge
    # it reaches (state_t's) is not c's type, so nothing is attributed
    assert "lib/unrelated.cu" not in out
    # and kernel.cu, which reaches state_t::merge, never gets counter_t's finding
    assert all(f.skeleton == "SK012" for fs in out.values() for f in fs)


def test_receiver_type_picks_the_struct_among_several_with_the_method():
    both = STATE + "\nstruct decoy_t {\n  __device__ void merge(const float* o, float m, float d) { m = expf(m); }\n};\n"
    files = [SourceFile("a/state.cuh", both, (_helper("a/state.cuh", "decoy_t::merge", 21, "SK004"),
                                                _helper("a/state.cuh", "state_t::merge", 11))),
             SourceFile("a/kernel.cu", KERNEL.split("template <class Runner")[0], ())]
    found = attribute(files)["a/kernel.cu"]
    assert [f.skeleton for f in found] == ["SK012"]  # st is declared state_t<4>: decoy_t::merge is not it


def test_own_findings_drops_earlier_copies():
    copy = _run()["lib/kernel.cu"][0]
    mine = Finding("SK001", "opportunity", "lib/kernel.cu", 3, 3, "MergeKernel")
    assert own_findings((mine, copy)) == (mine,)


def test_sk012_reports_the_state_merge_helper_and_not_an_online_softmax_step():
    from skel.miner.mine import analyze

    _, findings, err = analyze("state.cuh", STATE, "cuda")
    assert err is None
    assert [(f.skeleton, f.kind, f.kernel) for f in findings if f.skeleton == "SK012"] == \
        [("SK012", "instance", "state_t::merge")]
    step = """\
struct st_t { float o[4]; float m; float d; };
__device__ void update(st_t& st, float* s, int n) {
  float m_prev = st.m;
  for (int j = 0; j < n; ++j) { st.m = max(st.m, s[j]); }
  float scale = exp2f(m_prev - st.m);
  for (int j = 0; j < n; ++j) { s[j] = exp2f(s[j] - st.m); st.d += s[j]; }
  for (int i = 0; i < 4; ++i) { st.o[i] = st.o[i] * scale; }
}
"""
    _, findings, err = analyze("step.cuh", step, "cuda")
    assert err is None
    assert not [f for f in findings if f.skeleton == "SK012"]


def test_mine_attributes_across_files_and_redoes_it_when_only_the_header_changes(tmp_path):
    from skel.miner.mine import mine

    (tmp_path / "state.cuh").write_text(STATE)
    (tmp_path / "kernel.cu").write_text(KERNEL.split("template <class Runner")[0])
    catalog = tmp_path / "cat.sqlite"

    def merge_kernel(report):
        return [f for f in report.instances if f.kernel == "MergeKernel" and f.skeleton == "SK012"]

    cold = mine([tmp_path / "state.cuh", tmp_path / "kernel.cu"], catalog, jobs=1)
    assert [dict(f.params)["helper_file"] for f in merge_kernel(cold)] == [str(tmp_path / "state.cuh")]
    warm = mine([tmp_path / "state.cuh", tmp_path / "kernel.cu"], catalog, jobs=1)
    assert warm.cached == 2 and len(merge_kernel(warm)) == 1
    # the header stops merging (its output no longer takes the incoming vector): the unchanged
    # kernel file loses its copy, in the report and in the catalog
    (tmp_path / "state.cuh").write_text(STATE.replace("o[i] * f1 + other_o[i] * f2", "o[i] * f1"))
    changed = mine([tmp_path / "state.cuh", tmp_path / "kernel.cu"], catalog, jobs=1)
    assert changed.parsed == 1 and merge_kernel(changed) == []
    from skel.catalog.store import open_catalog

    cat = open_catalog(catalog)
    try:
        assert not [f for f in cat.findings(path=str(tmp_path / "kernel.cu")) if f.skeleton == "SK012"]
    finally:
        cat.close()
