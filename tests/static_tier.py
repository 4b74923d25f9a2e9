"""The static tier, for the edit loop: ``pytest -q -m static`` (about a minute on 2 cores).

Static tests read and transform text: parsers, detectors, rewrites compared as source, the library
and the catalog, the command line's parsing. They run no kernel in Triton's interpreter, start no
process (no gate worker, no CLI in a subprocess) and fetch no corpus. ``pytest -q`` still runs
everything; the marker only selects.

The tier is this list, not a guess (measured: a test over ~2 s stays out even when static): ``STATIC`` names each module whose tests are static, with the
tests of it that are not (by function name). The guard makes the list honest: a static test that
starts a process, launches a kernel in the interpreter or reaches for the corpus cache fails with
the reason, so a test that grows heavy leaves the tier by being listed, not by slowing it down.
"""
from __future__ import annotations

import contextlib
import multiprocessing.process
import os
import subprocess
import sys
import zipfile

import pytest

ALL: frozenset[str] = frozenset()

# module -> the tests of it that are not static (bare function names; every parameter case)
STATIC: dict[str, frozenset[str]] = {
    "test_cli_conventions.py": ALL,
    "test_crossfile.py": ALL,
    "test_cuda_frontend.py": frozenset({"test_real_flashinfer_decode_and_norm"}),  # fetches flashinfer
    "test_detect_short_circuit.py": ALL,
    "test_detectors.py": ALL,
    "test_empty_output.py": frozenset({"test_upstream_kda_wrapper_drops_its_zero_fill",
                                       "test_a_partial_writer_is_caught_by_the_poisoned_allocations"}),
    "test_harness_inline.py": frozenset({"test_zero_config_gate_through_helpers"}),  # gate workers
    "test_harness_sizes.py": frozenset({"test_zero_config_gate_on_a_chunked_kernel",
                                        "test_zero_config_gate_on_a_moved_pointer",
                                        "test_zero_config_gate_on_a_mode_switch",
                                        "test_zero_config_gate_on_rows"}),  # gate workers
    "test_harness_state_update.py": frozenset({"test_zero_config_gate_on_a_state_update",
                                               "test_a_width_asserted_as_a_product_is_computed_from_its_factors"}),
    "test_harness_strides.py": frozenset({"test_zero_config_gate_on_strided_layouts"}),  # gate workers
    "test_harness_run.py": frozenset({"test_the_interpreter_runs_the_original_as_compiled_code_would",
                                      "test_a_launcher_imported_from_a_sibling_module_has_its_autotuner_trimmed"}),
    "test_heldout2_classes.py": ALL,
    "test_heldout3_classes.py": ALL,
    "test_heldout4_classes.py": ALL,
    "test_kernels.py": frozenset({"test_kernel_matches_reference_on_ci_shapes"}),
    "test_layers.py": ALL,
    "test_launch_search.py": frozenset({"test_each_case_rewrite_agrees_with_its_original_in_the_interpreter",
                                        "test_a_dispatch_splits_small_batch_first_and_keeps_the_original_where_nothing_won"}),
    "test_layout.py": ALL,
    "test_lazy_decay.py": frozenset({
        "test_constexpr_branches_get_their_own_factor", "test_project_kernels_match_original",
        "test_review_cases_match_the_original", "test_row_and_column_gates_match_original",
        "test_upstream_gdn_matches_original", "test_upstream_kda_matches_original"}),
    "test_library.py": ALL,
    "test_match.py": frozenset({"test_kda_decode_kernel", "test_python_api_matches_cli", "test_text_output"}),
    "test_match_formats.py": frozenset({"test_sarif_is_valid_against_the_2_1_0_schema",  # the schema is a wheel
                                        "test_worker_processes_give_the_same_report"}),  # forks workers
    "test_merge_tiles.py": frozenset({
        "test_a_tile_width_written_at_the_launch_rewrites_the_grid_with_it",
        "test_launch_edge_cases_are_refused_or_kept_consistent", "test_launch_no_longer_splits_v",
        "test_other_fla_kernels_with_tuple_assigned_tiles_match_original", "test_project_kernels_match_original",
        "test_the_axis_with_the_most_repeated_work_is_merged_and_autotune_keeps_its_warps",
        "test_third_kernel_matches_original", "test_upstream_gdn_matches_original",
        "test_upstream_kda_matches_original",
        "test_default_plans_are_the_measured_winners"}),  # static, but 5-6 s: too slow for the loop
    "test_mining_classes.py": ALL,
    "test_mining_eval.py": frozenset({"test_the_fixed_classes_stay_fixed_on_real_files"}),  # fetches wheels
    "test_mine.py": frozenset({
        "test_concurrent_miners_share_one_catalog", "test_mines_the_fla_kda_folder",
        "test_parallel_workers_give_the_same_result"}),
    "test_mine_warm.py": ALL,
    "test_prompt.py": frozenset({
        "test_upstream_kda_names_rsqrt_and_merge_v_tiles_with_their_lines",
        # static, but each builds the KDA brief (every rule's rewrite run on the kernel): 5-15 s a test
        "test_budget_drops_in_the_documented_order", "test_cli_budget_too_small_exits_1_and_says_what_it_needs",
        "test_snapshot_kda_decode_without_evidence", "test_json_is_the_same_content",
        "test_ranking_by_evidence_and_roofline_standing", "test_budget_is_honoured_and_never_drops_names_or_conditions"}),
    "test_readme.py": ALL,
    "test_report_plot.py": ALL,
    "test_results_export.py": frozenset({"test_validate_records_its_verdict_with_the_environment"}),  # the gate
    "test_rewrites.py": frozenset({
        "test_project_decode_targets_rewritten_match_in_the_interpreter",
        "test_rewritten_kernel_matches_original_in_the_interpreter",
        "test_upstream_decode_files"}),  # fla-core's files, from a wheel: a corpus
    "test_skeleton_graph.py": ALL,
    "test_store.py": frozenset({
        "test_two_processes_writing_at_once_lose_nothing", "test_writer_killed_mid_transaction_leaves_catalog_intact"}),
    "test_suppress.py": ALL,
    "test_triton_frontend.py": frozenset({
        "test_kda_kernel_signature_and_tuning", "test_kda_launch_site", "test_kda_norm_division_and_math",
        "test_kda_program_axis_roles", "test_kda_time_loop_and_invariant_loads",
        "test_kda_work_repeated_by_each_v_tile", "test_profile_json_round_trip"}),
    "test_variants.py": ALL,
}
# Not listed, every test of them needs what the tier refuses: a git repository built by git
# (test_history*, test_hostile_catalog, test_preview, test_promote_paths), a process (test_mcp,
# test_capture, test_gate, test_hostile_inputs, test_mine_scaling), the interpreter (test_apply,
# test_cheaters*, test_skeleton_examples, test_golden) or a corpus (test_harness, test_fla_corpus,
# test_rule_invariant's real-corpus sample); test_user_library runs the CLI end to end.


def is_static(item: pytest.Item) -> bool:
    module = item.path.name
    if module not in STATIC:
        return False
    name = getattr(item, "originalname", None) or item.name.split("[")[0]
    return name not in STATIC[module]


def pytest_ignore_collect(collection_path, config) -> bool | None:
    """Under ``-m static`` exactly, modules with no static test are not even imported (collection is
    a third of the tier's time); any other run collects everything."""
    if config.getoption("markexpr", "") != "static":
        return None
    name = collection_path.name
    if name.startswith("test_") and name.endswith(".py") and name not in STATIC:
        return True
    return None


def pytest_sessionstart(session: pytest.Session) -> None:
    """Under ``-m static``, matplotlib's font cache is built before any test runs. On a fresh HOME its first
    import lists the system fonts with ``fc-list`` (a subprocess); inside a guarded test that trips the guard,
    the cache is never written, and the plot tests fail on every run until something else builds it."""
    if session.config.getoption("markexpr", "") != "static":
        return
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.font_manager  # noqa: F401  (builds and writes the cache once, unguarded)
    except ImportError:
        pass


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if is_static(item):
            item.add_marker(pytest.mark.static)


def _refuse(what: str):
    def refuse(*args, **kwargs):
        raise AssertionError(f"a static test {what}: list it as not static in tests/static_tier.py")
    return refuse


@contextlib.contextmanager
def _guard():
    mp = pytest.MonkeyPatch()
    try:
        mp.setattr(subprocess.Popen, "__init__", _refuse("started a subprocess"))
        mp.setattr(os, "fork", _refuse("forked"))
        mp.setattr(zipfile.ZipFile, "__init__", _refuse("opened a wheel (a corpus)"))
        mp.setattr(multiprocessing.process.BaseProcess, "start", _refuse("started a worker process"))
        try:  # imported here, whatever the tests before imported: the guard sees the same each run
            import triton.runtime.interpreter  # noqa: F401
        except ImportError:
            pass
        interpreter = sys.modules.get("triton.runtime.interpreter")
        if interpreter is not None:
            mp.setattr(interpreter.InterpretedFunction, "run",
                       _refuse("launched a kernel in Triton's interpreter"))
        conftest = sys.modules.get("conftest")
        if conftest is not None and hasattr(conftest, "corpus_cache_dir"):
            mp.setattr(conftest, "corpus_cache_dir", _refuse("reached for a downloaded corpus"))
        yield
    finally:
        mp.undo()


def _guarded(item: pytest.Item) -> bool:
    """Only the tier's own run (``-m static``) guards its tests: in a full run what earlier tests imported
    decides what the guard can see, and a full run must not fail on it."""
    return item.config.getoption("markexpr", "") == "static" and is_static(item)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    with _guard() if _guarded(item) else contextlib.nullcontext():
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item):
    with _guard() if _guarded(item) else contextlib.nullcontext():
        yield
