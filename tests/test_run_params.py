"""The run parameters as a record (``kit.params.RunParams``): its fields are ``kit.params.RUN``'s, the manifest
holds it, and the run notebook still shows the mapping a parameters file holds."""

from __future__ import annotations

import types
import typing

import msgspec
import pytest
from IPython.lib.pretty import pretty

from kit import params
from kit.cli import pipeline
from kit.experiment.design import ParamError
from kit.stages import run


def _runtime_types(annotation: object) -> set[type]:
    """The classes a field's annotation accepts (``list[str]`` -> list, ``str | None`` -> str and NoneType)."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return set().union(*map(_runtime_types, typing.get_args(annotation)))
    origin = typing.get_origin(annotation)
    return {origin if origin is not None else typing.cast(type, annotation)}  # not generic: the class itself


def test_run_params_fields_are_the_run_specs_names_types_and_optionality():
    fields = msgspec.structs.fields(params.RunParams)
    hints = typing.get_type_hints(params.RunParams)
    assert [f.name for f in fields] == [p.name for p in params.RUN]
    for f, spec in zip(fields, params.RUN, strict=True):
        wanted = set(spec.types) | ({types.NoneType} if spec.optional else set())
        assert _runtime_types(hints[f.name]) == wanted, f.name
        assert (f.default is None) == spec.optional, f"{f.name}: an optional parameter defaults to None, no other"


def test_configure_returns_the_record_with_the_batch_and_profile_it_chose():
    cfg = run.configure(pipeline.defaults("run"))
    assert isinstance(cfg.params, params.RunParams)
    assert cfg.params.batch and cfg.params.batch.startswith("batch-read-")
    assert cfg.params.profile == "openai-implicit" and cfg.batch == cfg.params.batch
    with pytest.raises(AttributeError):
        cfg.params.runs_per_arm = 3  # frozen: what configure checked stays checked


def test_the_notebook_shows_the_parameters_as_the_mapping_it_was_given():
    cfg = run.configure({**pipeline.defaults("run"), "batch": "b"})
    shown = pretty(cfg.params)
    assert shown == pretty(msgspec.structs.asdict(cfg.params))
    assert shown.startswith("{'batch': 'b',\n 'task': 'batch-read',")


def test_one_baseline_rule_for_every_stage():
    assert params.check_baseline(None, ["a", "b"]) == "a"
    assert params.check_baseline("b", ["a", "b"]) == "b"
    with pytest.raises(ParamError, match=r"'baseline': 'bb' is not an arm of the batch \(did you mean 'b'\?\)"):
        params.check_baseline("bb", ["a", "b"])
    assert params.RunParams(**(pipeline.defaults("run") | {"baseline": "batching"})).baseline_arm == "batching"
