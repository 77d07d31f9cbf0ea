"""Problem settings, defined once (docs/formats.md).

:class:`ProblemSettings` is the single definition of every setting: its type, bounds, default
and description.  The library validates with it (:func:`settings_from_dict`), the HTTP API uses
it as the ``settings`` member of its request and response models (so the OpenAPI schema lists
every setting), and the ``settings`` part of the ``placer.problem/v1`` JSON Schema is generated
from it (:func:`settings_json_schema`; a test keeps the checked-in schema equal to it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from solvers.model.errors import InvalidProblem

Objective = Literal["throughput", "latency"]
Schedule = Literal["1f1b", "gpipe", "interleaved-1f1b", "looped-bfs", "interleaved-zb", "zbv", "dualpipev", "auto"]
Pass = Literal["forward", "training"]
OBJECTIVES: tuple[str, ...] = ("throughput", "latency")
SCHEDULES: tuple[str, ...] = ("1f1b", "gpipe", "interleaved-1f1b", "looped-bfs", "interleaved-zb", "zbv", "dualpipev",
                              "auto")
ONE_STAGE_PER_RANK: tuple[str, ...] = ("gpipe", "1f1b")  # schedules with virtual_stages 1 only
TWO_STAGES_PER_RANK: tuple[str, ...] = ("zbv", "dualpipev")  # V-shaped: virtual_stages 2 only
PASSES: tuple[str, ...] = ("forward", "training")

MAX_DEFAULT_MICRO_BATCHES = 64  # global_batch without micro_batches: candidates up to this count


def global_batch_candidates(global_batch: int) -> tuple[int, ...]:
    """Micro-batch counts tried for ``global_batch`` when ``micro_batches`` is not given: the
    powers of two up to :data:`MAX_DEFAULT_MICRO_BATCHES` that divide it, and ``global_batch``
    itself when it is at most that (micro-batches of one sample)."""
    out = [m for m in (2**k for k in range(MAX_DEFAULT_MICRO_BATCHES.bit_length()))
           if m <= MAX_DEFAULT_MICRO_BATCHES and global_batch % m == 0]
    if global_batch <= MAX_DEFAULT_MICRO_BATCHES and global_batch not in out:
        out.append(global_batch)
    return tuple(out)


MIN_SEARCHED_MICRO_BATCHES = 4  # the searched candidates always reach at least this count


def searched_micro_batches(n_devices: int) -> tuple[int, ...]:
    """The micro-batch counts searched when ``micro_batches`` is unset (docs/formats.md).

    Powers of two from 1 to twice the device count rounded up to a power of two (at least
    :data:`MIN_SEARCHED_MICRO_BATCHES`): 1F1B keeps at most ``S - s`` micro-batches in flight,
    so counts beyond ``2 D >= 2 S`` add to the global batch but barely shrink the pipeline
    bubble ``(S - 1) / (MB + S - 1)``; 1 and 2 keep the activations of GPipe and of deep
    pipelines small when memory is short.  ``D = 32`` gives 1, 2, 4, ..., 64 (seven counts).
    """
    top = max(MIN_SEARCHED_MICRO_BATCHES, 2 * max(1, n_devices))
    out = [1]
    while out[-1] < top:
        out.append(2 * out[-1])
    return tuple(out)


def _integral(value: Any) -> Any:
    """Integers, and floats with an integral value; never booleans or strings."""
    if isinstance(value, bool | str):
        raise ValueError(f"must be an integer, got {value!r}")
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _real(value: Any) -> Any:
    """Finite real numbers; never booleans or strings."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"must be a number, got {type(value).__name__}")
    if not math.isfinite(value):
        raise ValueError(f"must be finite, got {value!r}")
    return value


def _strict_bool(value: Any) -> Any:
    if not isinstance(value, bool):
        raise ValueError(f"must be true or false, got {value!r}")
    return value


def _one_or_many(value: Any) -> Any:
    """``micro_batches`` may be a single count or a list of candidates."""
    if isinstance(value, float) and value.is_integer():  # JSON Schema: 8.0 is an integer
        return [value]
    return [value] if isinstance(value, int) and not isinstance(value, bool) else value


def _pin_target(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():  # JSON Schema: 27.0 is an integer
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ValueError(f"must be a device id or a stage index, got {value!r}")
    if isinstance(value, int) and not 0 <= value <= MAX_COUNT:
        raise ValueError(f"a stage index must be between 0 and {MAX_COUNT}, got {value}")
    return value


MAX_COUNT = 2**31 - 1  # counts and indices: 32-bit
MAX_MICRO_BATCH_CANDIDATES = 64  # entries of micro_batches
MAX_PINNED = 65_536  # entries of pinned
MAX_STAGE_CAPS = 16_384  # entries of stage_memory_caps_bytes: one per stage, at most one stage per device (MAX_DEVICES)
MAX_SEED = 2**53 - 1  # exact in a double, so that JSON Schema validators agree on the bound
Count = Annotated[int, Field(ge=1, le=MAX_COUNT), BeforeValidator(_integral)]
Seed = Annotated[int, Field(ge=0, le=MAX_SEED), BeforeValidator(_integral)]
NonNegative = Annotated[float, Field(ge=0.0), BeforeValidator(_real)]
Positive = Annotated[float, Field(gt=0.0), BeforeValidator(_real)]
Fraction = Annotated[float, Field(ge=0.0, lt=1.0), BeforeValidator(_real)]
Flag = Annotated[bool, BeforeValidator(_strict_bool)]
PinTarget = Annotated[str | int, BeforeValidator(_pin_target),
                      WithJsonSchema({"anyOf": [{"type": "string"},
                                                {"type": "integer", "minimum": 0, "maximum": MAX_COUNT}]})]
MicroBatches = Annotated[
    tuple[Count, ...], BeforeValidator(_one_or_many), Field(min_length=1, max_length=MAX_MICRO_BATCH_CANDIDATES),
    WithJsonSchema({"oneOf": [{"type": "integer", "minimum": 1, "maximum": MAX_COUNT},
                              {"type": "array", "minItems": 1, "maxItems": MAX_MICRO_BATCH_CANDIDATES,
                               "items": {"type": "integer", "minimum": 1, "maximum": MAX_COUNT}}]}),
]
DEFAULT_MAX_TP = 8  # max_tp: the GPUs of a DGX host (Narayanan et al., SC'21, §3.3, Takeaway #1)
MAX_TP = 1 << 14  # tp and max_tp: at most a device per group member (MAX_DEVICES)


def _power_of_two(value: Any) -> Any:
    value = _integral(value)
    if isinstance(value, int) and value >= 1 and value & (value - 1):
        raise ValueError(f"must be a power of two (1, 2, 4, 8, ...), got {value}")
    return value


TensorParallelDegree = Annotated[int, Field(ge=1, le=MAX_TP), BeforeValidator(_power_of_two),
                                 WithJsonSchema({"type": "integer", "enum": [1 << k for k in range(MAX_TP.bit_length())]})]
StageIndex = Annotated[int, Field(ge=0, le=MAX_COUNT), BeforeValidator(lambda k: int(k) if isinstance(k, str) and k.isdigit() else k)]


class ProblemSettings(BaseModel):
    """Problem settings.  Every field has a documented default (docs/formats.md).

    ``micro_batches``: candidate micro-batch counts per iteration (throughput; a solver picks
    one); ``None`` (unset): the solvers search :func:`searched_micro_batches` of the topology,
    read through :attr:`~solvers.model.problem.Problem.micro_batch_candidates`.
    ``global_batch``: samples per iteration (throughput; null: ``micro_batches`` × the graph's
    ``profiled_batch_size``); every candidate must divide it, and without ``micro_batches`` the
    candidates are :func:`global_batch_candidates`.
    ``schedule``: the pipeline schedule; ``"auto"`` (the default) searched
    (:func:`solvers.partition.schedules.search_schedules`), the plan naming the one chosen;
    ``virtual_stages``: stages per rank group, ``None`` searched.
    ``recompute``: ``True`` recomputes activations in every stage, ``False`` in none, ``None``
    (unset) in exactly the stages whose memory requires it (:func:`solvers.solving.solve`).
    ``stages`` / ``replicas``: fix S and R, or ``None`` to let the solver choose.  ``pinned``: op id -> device id (str) or stage index (int).
    ``stage_memory_caps_bytes``: stage index -> cap per device of that stage.
    ``memory_headroom``: fraction of every device's memory kept free.  In JSON, ``pass_`` is
    spelled ``pass``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, title="ProblemSettings")

    micro_batches: MicroBatches | None = Field(
        None, description="Candidate micro-batch counts per iteration (a solver picks one; null: powers of two "
                          "from 1 to twice the device count, at least 4, are searched).")
    global_batch: Count | None = Field(
        None, description=("Samples per iteration (throughput). Each candidate micro-batch count must divide it; "
                           "the graph is scaled to global_batch / micro_batches samples per micro-batch and the "
                           "iteration time is minimised. Null: micro-batches of the graph's profiled_batch_size, "
                           "and the time per sample is minimised."))
    schedule: Schedule = Field(
        "auto", description="Pipeline schedule of a throughput plan; auto (the default): the solver searches "
                            "gpipe, 1f1b, interleaved-1f1b, interleaved-zb, zbv and dualpipev with virtual_stages "
                            "1, 2 and 4 where they apply (zbv, dualpipev: 2) and keeps the fastest per sample; a "
                            "name fixes that schedule. The plan names the schedule chosen.")
    virtual_stages: Count | None = Field(
        None, description="Stages per rank group of interleaved and V-shaped schedules (null: searched among "
                           "1, 2 and 4 where the schedule allows; gpipe and 1f1b run 1, zbv and dualpipev 2).")
    pass_: Pass = Field("forward", alias="pass",
                        description="Latency objective: inference (forward) or forward + backward (training).")
    recompute: Flag | None = Field(
        None, description="Activation recomputation, keeping only stage-boundary inputs: true in every stage, "
                          "false in none (null: in exactly the stages whose memory requires it).")
    optimizer_bytes_per_param_byte: NonNegative = Field(
        3.0, description="Gradient + optimizer state bytes per parameter byte (3: Adam moments + gradient).")
    memory_headroom: Fraction = Field(
        0.0, description="Fraction of every device's memory kept free.")
    stages: Count | None = Field(None, description="Fix the number of pipeline stages (null: the solver chooses).")
    replicas: Count | None = Field(None, description="Fix the replicas per stage (null: the solver chooses).")
    tp: TensorParallelDegree | None = Field(
        None, description="Fix every stage's tensor-parallel degree, a power of two (null: the solver chooses among "
                          "1, 2, 4, ... up to max_tp; docs/tensor-parallel.md). Above 1 only with the gpipe, 1f1b or "
                          "auto schedule.")
    max_tp: TensorParallelDegree = Field(
        DEFAULT_MAX_TP, description="Largest tensor-parallel degree the throughput solvers try per stage, a power "
                                    "of two (1: no tensor parallelism).")
    tp_within_host: Flag = Field(
        True, description="Keep each tensor-parallel group on the devices of one host (false: a group may span "
                          "hosts where one host has too few devices).")
    pinned: dict[str, PinTarget] = Field(
        default_factory=dict, max_length=MAX_PINNED,
        description="Op id -> device id (string) or stage index (integer).")
    stage_memory_caps_bytes: dict[StageIndex, NonNegative] = Field(
        default_factory=dict, max_length=MAX_STAGE_CAPS,
        description="Stage index -> memory cap per device of that stage, in bytes.",
        json_schema_extra={"propertyNames": {"pattern": "^[0-9]{1,9}$"}})  # 32-bit indices
    no_empty_stage: Flag = Field(True, description="Every stage holds at least one op.")
    time_limit_s: Positive | None = Field(None, description="Wall-clock limit of the solve (null: none).")
    seed: Seed = Field(0, description="Seed of every random choice; the same seed gives the same plan.")

    @model_validator(mode="before")
    @classmethod
    def _candidates_for_global_batch(cls, data: Any) -> Any:
        """``global_batch`` without ``micro_batches``: the candidates are :func:`global_batch_candidates`."""
        if isinstance(data, Mapping) and "micro_batches" not in data:
            batch = data.get("global_batch")
            if isinstance(batch, float) and batch.is_integer():
                batch = int(batch)
            if isinstance(batch, int) and not isinstance(batch, bool) and 1 <= batch <= MAX_COUNT:
                return {**data, "micro_batches": global_batch_candidates(batch)}
        return data

    @field_validator("global_batch")
    @classmethod
    def _divisible(cls, batch: int | None, info: ValidationInfo) -> int | None:
        """Every candidate micro-batch count divides the global batch."""
        candidates = info.data.get("micro_batches")
        if batch is not None and candidates:
            wrong = [m for m in candidates if batch % m]
            if wrong:
                raise ValueError(f"{batch} samples do not split into {wrong[0]} equal micro-batches "
                                 f"(micro_batches {list(candidates)}: each must divide global_batch)")
        return batch

    @field_validator("virtual_stages")
    @classmethod
    def _stages_per_rank(cls, v: int | None, info: ValidationInfo) -> int | None:
        """gpipe and 1f1b run one stage per rank, zbv and dualpipev two."""
        schedule = info.data.get("schedule")
        if v is not None and v != 1 and schedule in ONE_STAGE_PER_RANK:
            raise ValueError(f"schedule {schedule!r} runs one stage per rank, got {v} (use interleaved-1f1b, "
                             "looped-bfs, interleaved-zb or auto for several)")
        if v is not None and v != 2 and schedule in TWO_STAGES_PER_RANK:
            raise ValueError(f"schedule {schedule!r} runs exactly 2 stages per rank, got {v}")
        return v

    @field_validator("tp")
    @classmethod
    def _tp_schedule(cls, tp: int | None, info: ValidationInfo) -> int | None:
        """Tensor-parallel stages run under GPipe and 1F1B (the action-list engine times no split stages)."""
        schedule = info.data.get("schedule")
        if tp is not None and tp > 1 and schedule not in (*ONE_STAGE_PER_RANK, "auto"):
            raise ValueError(f"tensor-parallel stages (tp {tp}) run under gpipe or 1f1b only, got schedule "
                             f"{schedule!r} (use gpipe, 1f1b or auto)")
        return tp

    @property
    def own_schedule(self) -> str:
        """The schedule a solver plans its own stages under: GPipe when asked for, 1F1B otherwise (``auto``
        and the multi-stage schedules cut the solver's rank groups afterwards,
        :func:`solvers.partition.schedules.search_schedules`); a solver called on its own reads this."""
        return "gpipe" if self.schedule == "gpipe" else "1f1b"

    @property
    def recomputes(self) -> bool:
        """Recomputation in every stage: ``recompute`` is true.  Unset reads as false here (a solver
        called on its own); :func:`solvers.solving.solve` decides it per stage first."""
        return self.recompute is True

    def to_dict(self) -> dict[str, Any]:
        """The canonical JSON form (``pass`` spelled as in JSON, keys of mappings sorted)."""
        out = self.model_dump(mode="json", by_alias=True)
        out["pinned"] = dict(sorted(self.pinned.items()))
        out["stage_memory_caps_bytes"] = {str(k): v for k, v in sorted(self.stage_memory_caps_bytes.items())}
        if out["virtual_stages"] is None:  # unset is left out, so problems without it keep their digests
            del out["virtual_stages"]
        for key, default in (("tp", None), ("max_tp", DEFAULT_MAX_TP), ("tp_within_host", True)):
            if out[key] == default:  # defaults left out: problems from before these settings keep their digests
                del out[key]
        return out


def _field_path(where: str, loc: tuple[int | str, ...]) -> str:
    """``settings.pinned.a`` from a validation location (list positions and key markers dropped)."""
    parts = [str(p) for p in loc if not isinstance(p, int) and p != "[key]"]
    return ".".join([where, *parts]) if where else ".".join(parts)


def settings_from_dict(raw: ProblemSettings | Mapping[str, Any] | None, where: str = "settings") -> ProblemSettings:
    """Validate a settings mapping (JSON names; unknown keys rejected).

    Raises :class:`~solvers.model.errors.InvalidProblem` whose ``field`` names the setting
    (``settings.micro_batches``, ``settings.pinned.<op>`` ...).
    """
    if raw is None:
        return ProblemSettings()
    if isinstance(raw, ProblemSettings):
        return raw
    if not isinstance(raw, Mapping):
        raise InvalidProblem(f"{where}: must be an object, got {type(raw).__name__}", field=where)
    try:
        return ProblemSettings.model_validate(dict(raw))
    except ValidationError as exc:
        err = exc.errors()[0]
        field = _field_path(where, tuple(err["loc"]))
        if err["type"] == "extra_forbidden":
            allowed = ", ".join(sorted(f.alias or name for name, f in ProblemSettings.model_fields.items()))
            why = f"unknown field (allowed: {allowed})"
        else:
            why = str(err["msg"]).removeprefix("Value error, ")
        raise InvalidProblem(f"{field}: {why}", field=field) from None


def settings_json_schema() -> dict[str, Any]:
    """The JSON Schema of the ``settings`` object (draft 2020-12), generated from :class:`ProblemSettings`."""
    schema = ProblemSettings.model_json_schema(by_alias=True, mode="validation")
    schema.pop("title", None)
    return schema
