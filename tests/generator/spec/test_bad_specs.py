"""The malformed corpus: each spec in tests/generator/fixtures/bad is refused with exactly the
message pinned next to it, exit code 2, nothing on stdout and no traceback.

A case is a file NN_name.yaml, or a folder NN_name/ whose spec files are validated together
(cycles and collisions across files); NN_name.expected holds the expected stderr. Regenerate
the expectations with `python tests/generator/update_goldens.py` and review the diff.
"""

from __future__ import annotations

import pytest

from tests.support.generator import BAD, UPDATE_COMMAND, bad_cases, bad_validate, run_cli

#: What the corpus must cover, by the case names that cover it.
REQUIRED = {
    "bad YAML": "01_bad_yaml",
    "tabs": "02_tab_indent",
    "non-UTF-8 bytes": "03_non_utf8",
    "object tags": "05_object_tag",
    "merge keys": "07_merge_key",
    "billion laughs": "08_billion_laughs",
    "deep nesting": "09_deep_nesting",
    "duplicate keys": "11_duplicate_key",
    "unknown keys with did-you-mean": "12_unknown_key",
    "wrong types": "14_wrong_types",
    "bad enum with did-you-mean": "15_bad_enum",
    "bad identifiers": "17_bad_identifiers",
    "Python keywords as names": "18_python_keywords",
    "missing required keys": "19_missing_required_keys",
    "extends cycle across two files": "20_extends_cycle",
    "missing parent": "21_missing_parent",
    "name collision across files": "22_name_collision",
    "alias preset with unknown option": "23_alias_unknown_option",
    "alias value of wrong type": "24_alias_wrong_type",
    "default not in choices": "25_default_not_in_choices",
    "mapping default": "26_mapping_default",
    "default precision not supported": "27_precision_not_supported",
    "unknown cluster environment": "28_unknown_cluster_environment",
    "abstract environment in cluster list": "29_abstract_cluster_environment",
    "unknown accelerator": "30_unknown_accelerator",
    "wrapper/base mismatch": "31_wrapper_base_mismatch",
    "launcher on single device": "32_launcher_on_single_device",
    "reserved option name": "33_reserved_option_names",
    "ambiguous precision plugins": "34_ambiguous_precision_plugins",
    "default precision not accepted on an accelerator": "47_default_precision_not_on_accelerator",
    "option without a type the runtime does not read": "48_option_without_type",
    "device type missing, or given twice": "60_device_type_or_current_device",
    "precision probes outside the supported ones, or of the default": "61_precision_probes",
    "backend from torch's device map with a fixed name": "62_device_map_backend_with_torch_name",
    "formats of the device keys": "63_device_key_formats",
    "precision probes on a strategy": "64_probes_on_a_strategy",
    "DeepSpeed accelerator DeepSpeed lacks, or refused where it lacks one": "65_deepspeed_accelerator",
    ".nan as a default, a choice or a preset": "66_not_a_number_default",
    "a condition of not_equal alone": "67_not_equal_alone",
    "options named like the constructor's own names, a hooks file no module can be named after": (
        "68_names_that_break_generated_code"
    ),
    "class names of the registry module and of builtins": "69_class_names_that_shadow",
    "environment running inside one that does not exist, or inside itself": "70_runs_inside_unknown",
    "environment listed after one it runs inside": "71_runs_inside_order",
}


def test_corpus_covers_what_it_must() -> None:
    cases = bad_cases()
    assert len(cases) >= 25
    missing = {what: case for what, case in REQUIRED.items() if case not in cases}
    assert not missing
    with pytest.raises(UnicodeDecodeError):  # the fixture really holds bytes that are not UTF-8
        (BAD / "03_non_utf8.yaml").read_bytes().decode("utf-8")


@pytest.mark.parametrize("case", bad_cases())
def test_malformed_spec_is_refused_with_its_pinned_message(case: str) -> None:
    expected_file = BAD / f"{case}.expected"
    assert expected_file.is_file(), f"no {expected_file.name}; run `{UPDATE_COMMAND}`"
    result = bad_validate(case)
    assert result.code == 2
    assert result.out == ""
    assert "Traceback" not in result.err
    expected = expected_file.read_text(encoding="utf-8")
    assert result.err == expected, f"stderr changed; if intended, run `{UPDATE_COMMAND}`"


@pytest.mark.parametrize("case", bad_cases())
def test_every_message_names_file_line_and_column(case: str) -> None:
    lines = [
        line
        for line in (BAD / f"{case}.expected").read_text(encoding="utf-8").splitlines()
        if line.startswith("error: ")
    ]
    assert lines
    for line in lines:
        location = line[len("error: ") :].split(": ", 1)[0]
        if case.startswith("42_"):  # the file name itself is the problem
            assert location == "42_bad.file.name.yaml"
            continue
        file, line_no, column = location.rsplit(":", 2)
        assert file.endswith(".yaml") and int(line_no) >= 1 and int(column) >= 1


def test_validate_reports_problems_of_several_files_at_once() -> None:
    result = run_cli(
        "validate",
        "--project",
        BAD.parent / "minimal",
        "12_unknown_key.yaml",
        "15_bad_enum.yaml",
        cwd=BAD,
    )
    assert result.code == 2
    assert "12_unknown_key.yaml:3:5:" in result.err and "15_bad_enum.yaml:5:15:" in result.err
    assert result.err.rstrip().endswith("2 problems found; nothing was written.")
