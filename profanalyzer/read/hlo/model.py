"""The typed, frozen form of a compiled program: `Program` -> `Module` ->
`Computation` -> `Instruction`, the same whichever reader made it (HLO text,
HloProto, a dump folder, a capture's `/host:metadata`).

Imports: nothing from the project (the readers, the schedule table and the
truth build on it).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from profanalyzer.core.vocab import FRAMEWORK_FILE

#: INT64_MAX: the compiler's "no estimate" for `estimated_cycles`.
UNKNOWN_CYCLES = 9223372036854775807

#: Bits per element of each HLO element type (the text spelling).
DTYPE_BITS: dict[str, int] = {
    "pred": 8, "s1": 1, "u1": 1, "s2": 2, "u2": 2, "s4": 4, "u4": 4, "s8": 8, "u8": 8, "s16": 16, "u16": 16,
    "s32": 32, "u32": 32, "s64": 64, "u64": 64, "f16": 16, "bf16": 16, "f32": 32, "f64": 64, "c64": 64, "c128": 128,
    "f8e5m2": 8, "f8e4m3": 8, "f8e4m3fn": 8, "f8e4m3b11fnuz": 8, "f8e3m4": 8, "f8e5m2fnuz": 8, "f8e4m3fnuz": 8,
    "f4e2m1fn": 4, "f8e8m0fnu": 8, "token": 0, "opaque": 0,
}
FP8_DTYPES = frozenset(t for t in DTYPE_BITS if t.startswith("f8e") and t != "f8e8m0fnu")
FP4_DTYPES = frozenset({"f4e2m1fn"})
INT8_DTYPES = frozenset({"s8", "u8"})
INT4_DTYPES = frozenset({"s4", "u4", "s2", "u2"})


@dataclass(frozen=True)
class Shape:
    """An array shape (`dtype`, `dims`, `memory_space` from `S(n)` in the
    layout; 0 is HBM) or a tuple of shapes (`dtype` "tuple")."""

    dtype: str
    dims: tuple[int, ...] = ()
    memory_space: int = 0
    parts: tuple[Shape, ...] = ()
    layout: str = ""

    @property
    def is_tuple(self) -> bool:
        return self.dtype == "tuple"

    @property
    def elements(self) -> int:
        return math.prod(self.dims) if self.dims else 1

    @cached_property
    def bytes(self) -> int:
        """Logical bytes (elements x element width; tuples: the sum of their
        parts; tiling padding not counted). Kept once computed: a program's
        instructions share their Shape objects (the decoders memoise them)."""
        if self.is_tuple:
            return sum(p.bytes for p in self.parts)
        return (self.elements * DTYPE_BITS.get(self.dtype, 0) + 7) // 8

    def leaves(self) -> tuple[Shape, ...]:
        if not self.is_tuple:
            return (self,)
        return tuple(leaf for p in self.parts for leaf in p.leaves())

    @property
    def dtypes(self) -> tuple[str, ...]:
        """Element types of the array leaves, in order, each once."""
        return tuple(dict.fromkeys(s.dtype for s in self.leaves()))

    def text(self) -> str:
        if self.is_tuple:
            return "(" + ", ".join(p.text() for p in self.parts) + ")"
        lay = self.layout
        if not lay and self.memory_space:
            lay = f"{{:S({self.memory_space})}}"
        return f"{self.dtype}[{','.join(map(str, self.dims))}]{lay}"


@dataclass(frozen=True)
class OpMetadata:
    op_type: str = ""
    op_name: str = ""
    source_file: str = ""
    source_line: int = 0
    stack_frame_id: int = 0


@dataclass(frozen=True)
class StackFrames:
    """The module's stack-frame index (1-based ids, as the HLO prints them)."""

    file_names: tuple[str, ...] = ()
    function_names: tuple[str, ...] = ()
    file_locations: tuple[tuple[int, int, int], ...] = ()  # (file_name_id, function_name_id, line)
    frames: tuple[tuple[int, int], ...] = ()  # (file_location_id, parent_frame_id)

    def user_location(self, frame_id: int) -> tuple[str, int, str] | None:
        """(file, line, function) of the innermost frame in the user's own code: walking out through the
        parents past framework and library files (vocab.FRAMEWORK_FILE); the innermost frame when every
        frame is a framework's. Kept per frame id (`_user_locations`): a program's instructions share frames."""
        memo = self._user_locations
        if frame_id in memo:
            return memo[frame_id]
        got = self.location(frame_id)
        f, seen = frame_id, set()
        while 0 < f <= len(self.frames) and f not in seen:
            seen.add(f)
            loc = self.location(f)
            if loc is not None and loc[0] and not FRAMEWORK_FILE.search(loc[0]):
                got = loc
                break
            f = self.frames[f - 1][1]
        memo[frame_id] = got
        return got

    @cached_property
    def _user_locations(self) -> dict[int, tuple[str, int, str] | None]:
        """user_location's answers so far, by frame id (outside the fields: equality and the JSON ignore it)."""
        return {}

    def location(self, frame_id: int) -> tuple[str, int, str] | None:
        """(file, line, function) of a frame: the innermost frame itself."""
        if not (0 < frame_id <= len(self.frames)):
            return None
        loc_id = self.frames[frame_id - 1][0]
        if not (0 < loc_id <= len(self.file_locations)):
            return None
        f_id, fn_id, line = self.file_locations[loc_id - 1]
        file = self.file_names[f_id - 1] if 0 < f_id <= len(self.file_names) else ""
        fn = self.function_names[fn_id - 1] if 0 < fn_id <= len(self.function_names) else ""
        return file, line, fn


@dataclass(frozen=True)
class Instruction:
    name: str
    opcode: str
    shape: Shape
    operands: tuple[str, ...] = ()  # instruction names (no `%`, no `#i` tuple index)
    operand_indices: tuple[int, ...] = ()  # per operand: the `#i` tuple index the text gives, else -1
    called: tuple[str, ...] = ()  # computations it calls (calls=, to_apply=, body=, condition=, branches)
    attrs: tuple[tuple[str, str], ...] = ()  # every other attribute, raw text, in order
    metadata: OpMetadata = OpMetadata()
    backend_config: str = ""  # raw (JSON on TPU)
    text: str = ""  # the instruction as the HLO prints it (what XProf stores as the op's name)
    is_root: bool = False
    parameter_number: int = -1
    literal: str = ""  # constants: the literal text (`15`, `{...}`)
    #: constants of 8-bit integers read from a proto: (elements, nonzero, min, max); () otherwise
    literal_stats: tuple[int, ...] = ()

    @classmethod
    def decoded(cls, name: str, opcode: str, shape: Shape, operands: tuple[str, ...], called: tuple[str, ...],
                attrs: tuple[tuple[str, str], ...], metadata: OpMetadata, backend_config: str, text: str,
                is_root: bool, parameter_number: int, literal: str, literal_stats: tuple[int, ...]) -> Instruction:
        """An Instruction with every field given (operand_indices: none), as a decoder builds thousands: the
        instance dict is filled in one step, where the frozen dataclass's `__init__` sets each field through
        `object.__setattr__` (about 4x the time). Same fields, same equality (tests/test_hlo_proto.py)."""
        ins = object.__new__(cls)
        ins.__dict__.update(name=name, opcode=opcode, shape=shape, operands=operands, operand_indices=(),
                            called=called, attrs=attrs, metadata=metadata, backend_config=backend_config, text=text,
                            is_root=is_root, parameter_number=parameter_number, literal=literal,
                            literal_stats=literal_stats)
        return ins

    def attr(self, key: str, default: str = "") -> str:
        for k, v in self.attrs:
            if k == key:
                return v
        return default

    @property
    def fusion_kind(self) -> str:
        return self.attr("kind")

    @property
    def custom_call_target(self) -> str:
        return _unquote(self.attr("custom_call_target"))

    @property
    def async_execution_thread(self) -> str:
        return _unquote(self.attr("async_execution_thread"))

    @cached_property
    def config(self) -> Mapping[str, Any]:
        """backend_config as JSON ({} when absent or not JSON)."""
        raw = self.backend_config.strip()
        if not raw.startswith("{"):
            return {}
        try:
            out = json.loads(raw)
        except ValueError:
            return {}
        return out if isinstance(out, dict) else {}

    @cached_property
    def estimated_cycles(self) -> int | None:
        """The compiler's cost estimate (`estimated_cycles` anywhere in the
        backend config); None when absent or INT64_MAX (unknown). Kept once
        read: picking the main module, the replay and expected-vs-measured
        each ask every instruction."""
        v = _find_key(self.config, "estimated_cycles")
        try:
            n = int(v) if v is not None else None
        except (TypeError, ValueError):
            return None
        if n is None or n < 0 or n >= UNKNOWN_CYCLES:
            return None
        return n

    @property
    def has_unknown_estimate(self) -> bool:
        v = _find_key(self.config, "estimated_cycles")
        try:
            return v is not None and int(v) >= UNKNOWN_CYCLES
        except (TypeError, ValueError):
            return False

    @property
    def device_type(self) -> str:
        v = _find_key(self.config, "device_type")
        return v if isinstance(v, str) else ""

    @property
    def known_trip_count(self) -> int | None:
        v = self.config.get("known_trip_count")
        if isinstance(v, dict):
            v = v.get("n")
        try:
            return int(v) if v is not None else None
        except (TypeError, ValueError):
            return None

    @property
    def kernel_metadata(self) -> str:
        fa = self.attr("frontend_attributes")
        m = re.search(r"kernel_metadata=", fa)
        return fa[m.end():] if m else ""


def _unquote(s: str) -> str:
    s = s.strip()
    if len(s) >= 2 and s[0] == s[-1] == '"':
        return s[1:-1]
    return s


def _find_key(obj: Any, key: str, depth: int = 0):
    """The first value of `key` in a JSON tree (breadth first)."""
    if depth > 8:
        return None
    if isinstance(obj, dict):
        if key in obj:
            return obj[key]
        for v in obj.values():
            if isinstance(v, (dict, list)):
                got = _find_key(v, key, depth + 1)
                if got is not None:
                    return got
    elif isinstance(obj, list):
        for v in obj:
            got = _find_key(v, key, depth + 1)
            if got is not None:
                return got
    return None


@dataclass(frozen=True)
class Computation:
    name: str
    instructions: tuple[Instruction, ...]
    is_entry: bool = False
    execution_thread: str = ""  # "" = main thread

    @cached_property
    def by_name(self) -> dict[str, Instruction]:
        return {i.name: i for i in self.instructions}

    @property
    def root(self) -> Instruction | None:
        for i in self.instructions:
            if i.is_root:
                return i
        return self.instructions[-1] if self.instructions else None


@dataclass(frozen=True)
class Module:
    name: str
    computations: tuple[Computation, ...]
    entry: str
    is_scheduled: bool = False
    stack: StackFrames = StackFrames()
    source: str = ""  # where it was read from (file, stage)
    stage: str = ""  # after_codegen / after_optimizations / ... / proto
    num_partitions: int = 1
    proto: bytes = field(default=b"", repr=False)  # the serialized HloProto it was read from ("" for text)

    @cached_property
    def by_name(self) -> dict[str, Computation]:
        return {c.name: c for c in self.computations}

    @property
    def entry_computation(self) -> Computation | None:
        return self.by_name.get(self.entry)

    @cached_property
    def callers(self) -> dict[str, tuple[Instruction, Computation]]:
        """Computation name -> the (first) instruction calling it and where."""
        out: dict[str, tuple[Instruction, Computation]] = {}
        for c in self.computations:
            for i in c.instructions:
                for callee in i.called:
                    out.setdefault(callee, (i, c))
        return out

    def instruction(self, name: str) -> Instruction | None:
        for c in self.computations:
            got = c.by_name.get(name)
            if got is not None:
                return got
        return None

    @property
    def instruction_count(self) -> int:
        return sum(len(c.instructions) for c in self.computations)

    @property
    def estimated_cycles(self) -> int:
        return sum(i.estimated_cycles or 0 for c in self.computations for i in c.instructions)


@dataclass(frozen=True)
class DumpFiles:
    """The auxiliary text files of an XLA dump, by role (empty when absent)."""

    compile_log: str = ""
    buffer_assignment: str = ""
    memory_report: str = ""
    flagfile: str = ""
    #: the dump's `*.target_arguments.txt` (the chip: `tpu_topology_args { version: ... variant: ... }`)
    target_arguments: str = ""
    #: the compiler's memory_analysis() / cost_analysis() saved beside a program file as JSON
    #: (`NAME.compiler.json`, tools/compile_corpus.py)
    compiler_json: str = ""
    #: the heap values' live ranges of a text dump (`*after_optimizations-live-range.txt`)
    live_range: str = ""
    #: HloProtos carrying a buffer assignment beside a final stage that has none (the dump's
    #: `after_optimizations.hlo.pb`, or the corpus' `NAME.hlo.pb.gz` beside `NAME.after_codegen.hlo.pb.gz`)
    assignment_protos: tuple[bytes, ...] = ()


@dataclass(frozen=True)
class Program:
    """What a reader found: the modules, which one is the main one and why,
    and a dump's auxiliary files."""

    modules: tuple[Module, ...]
    main_index: int = 0
    source: str = ""
    why_main: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)
    files: DumpFiles = DumpFiles()
    #: the XLA dump file the main module's constant values came from (a capture's HloProto lacks them), or ""
    literal_source: str = ""

    @property
    def main(self) -> Module:
        return self.modules[self.main_index]


def pick_main(modules: tuple[Module, ...]) -> tuple[int, str]:
    """The main module: the most compiler-estimated cycles, then the most
    instructions (the program a step spends its time in)."""
    if not modules:
        return 0, "no module"
    best = max(range(len(modules)), key=lambda k: (modules[k].estimated_cycles, modules[k].instruction_count, -k))
    m = modules[best]
    if len(modules) == 1:
        return best, f"the only module ({m.instruction_count} instructions)"
    return best, (f"the most compiler-estimated cycles ({m.estimated_cycles}) and instructions "
                  f"({m.instruction_count}) of {len(modules)} modules")
