"""TPU generations profanalyzer knows: peaks, memory, interconnect, ridge points.

Figures are per chip as published (each chip's `source`; see also
../shared/reference/tpu-xspace-facts.md section 6, real-tpu.md and the TPU7x
guide); per-core figures divide by the number of device planes a chip shows
in a trace (TPU7x: 2 TensorCores, each its own plane; v4 and v5p: megacore,
one plane per chip; v5e and v6e: one TensorCore).

A chip is recognised from what the input itself says, in this order: the
device planes' `device_type_string`, the `/host:metadata` plane's
`tpu_version` ("TFRT TPU v5 lite"), an XLA dump's `target_arguments.txt`
(`tpu_topology_args { version: TPU_VERSION_VIPERFISH variant: "lite" }`),
a compile log's `compile_topology`; TPU7x is *assumed* only when none says.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from profanalyzer.core.vocab import CHIP_TABLE

#: Display names: the vocabulary's chip table.
CHIP_DISPLAY = {c.key: c.display for c in CHIP_TABLE}

GIGA = 1e9
TERA = 1e12


@dataclass(frozen=True)
class ReplayCalibration:
    """How the compiler's `estimated_cycles` turn into time on a chip, fitted on programs that ran
    on it (tools/calibrate_replay.py over sample_traces/real-tpu/): per op, cycles / clock is divided
    by the factor of its class (compute-bound: HLO FLOPs at the BF16 peak exceed its HBM bytes at the
    HBM bandwidth; else memory-bound)."""

    compute: float
    memory: float
    #: the fit's provenance: the corpus, its size, the command
    source: str


@dataclass(frozen=True)
class Chip:
    key: str  # CLI name: tpu7x, v6e, v5p
    name: str  # human name
    device_type_strings: tuple[str, ...]  # XProf `device_type_string` values
    peak_bf16_tflops: float  # per chip
    peak_fp8_tflops: float  # per chip
    hbm_gib: float
    hbm_gbps: float  # GB/s per chip
    ici_gbps: float  # bidirectional GB/s per chip
    tensorcores: int
    sparsecores: int
    planes_per_chip: int  # TensorCore device planes per chip in a trace
    vmem_mib_per_core: int
    #: MXUs per chip and the MXU dimension (dim x dim systolic array): ASSUMED
    #: (the facts and the guide publish no per-chip MXU count); they only
    #: serve to infer `clock_ghz`. v6e: 4 MXUs of 256x256; TPU7x: 2
    #: TensorCores x 4 MXUs of 256x256; v5p: 8 MXUs of 128x128.
    mxus: int
    mxu_dim: int
    #: TensorCore clock (GHz): an ASSUMPTION, no published figure was found.
    #: Inferred from the published BF16 peak when the chip is built, as peak =
    #: MXUs x 2 x dim x dim x f (v6e: 918e12 / (4 x 2 x 256 x 256) = 1.75 GHz;
    #: TPU7x: 2307e12 / (8 x 2 x 256 x 256) = 2.20 GHz; v5p: 459e12 / (8 x 2 x
    #: 128 x 128) = 1.75 GHz); the compiler's `estimated_cycles` are read at it.
    #: A peak read from a trace later (`dataclasses.replace`) keeps the clock.
    clock_ghz: float = 0.0
    #: INT8 MXU peak, TOPS per chip as published; 0 where none is published
    #: (TPU7x: its FP8 rate is assumed for int8 x int8 matmuls, see core_peak_int8_flops).
    peak_int8_tops: float = 0.0
    #: host <-> HBM link, GB/s per chip as published; 0 where no figure is published (every chip here today:
    #: the replay then prices host transfers at HBM bandwidth and says so)
    host_gbps: float = 0.0
    #: `tpu_topology_args { version: ... variant: ... }` of an XLA dump's target_arguments.txt
    #: ("VIPERFISH:lite"; a version alone where the dump gives no variant)
    target_versions: tuple[str, ...] = ()
    #: where the figures come from
    source: str = ""
    #: the before-the-run cost model fitted on this chip's real programs (None: not fitted, cycles at the clock)
    replay_calibration: ReplayCalibration | None = None

    def __post_init__(self) -> None:
        if not self.clock_ghz:
            f = self.peak_bf16_tflops * TERA / (self.mxus * 2 * self.mxu_dim * self.mxu_dim) / GIGA
            object.__setattr__(self, "clock_ghz", round(f, 4))

    @property
    def clock_hz(self) -> float:
        return self.clock_ghz * GIGA

    # -- per TensorCore plane --------------------------------------------
    @property
    def core_peak_bf16_flops(self) -> float:
        return self.peak_bf16_tflops * TERA / self.planes_per_chip

    @property
    def core_peak_fp8_flops(self) -> float:
        """FP8 MXU rate; a chip whose MXU has no FP8 (v4, v5e) runs FP8 data
        through its BF16 path, at the BF16 rate."""
        return (self.peak_fp8_tflops or self.peak_bf16_tflops) * TERA / self.planes_per_chip

    @property
    def core_peak_int8_flops(self) -> float:
        """INT8 MXU rate (int8 x int8 matmuls): the published INT8 figure;
        where none is published (TPU7x) the FP8 figure is assumed."""
        if self.peak_int8_tops:
            return self.peak_int8_tops * TERA / self.planes_per_chip
        return self.core_peak_fp8_flops

    # -- levers the MXU has ------------------------------------------------
    @property
    def fp8_speedup(self) -> float:
        """FP8 over BF16 MXU peak: 2 on TPU7x; 1 where FP8 runs at the BF16
        rate (v5p, v6e) or the MXU has none (v4, v5e)."""
        return (self.peak_fp8_tflops / self.peak_bf16_tflops) if self.peak_fp8_tflops else 1.0

    @property
    def has_fp8_mxu(self) -> bool:
        """FP8 is a compute lever on this chip (its MXU runs FP8 faster than BF16)."""
        return self.fp8_speedup > 1.01

    @property
    def int8_speedup(self) -> float:
        """Published INT8 over BF16 MXU peak (1 where no INT8 figure is published)."""
        return (self.peak_int8_tops / self.peak_bf16_tflops) if self.peak_int8_tops else 1.0

    @property
    def has_int8_mxu(self) -> bool:
        """INT8 is a compute lever on this chip (a published INT8 peak above BF16's)."""
        return self.int8_speedup > 1.01

    @property
    def low_precision(self) -> str | None:
        """The low-precision matmul lever of this chip: 'fp8' where the MXU runs
        FP8 faster (TPU7x), else 'int8' where it runs INT8 faster (v5e, v5p,
        v6e: MaxText's own guidance is int8 there), else None (v4)."""
        if self.has_fp8_mxu:
            return "fp8"
        if self.has_int8_mxu:
            return "int8"
        return None

    @property
    def core_hbm_bytes_per_s(self) -> float:
        return self.hbm_gbps * GIGA / self.planes_per_chip

    @property
    def core_ici_bytes_per_s(self) -> float:
        return self.ici_gbps * GIGA / self.planes_per_chip

    # -- ridge points (FLOP/byte) ------------------------------------------
    @property
    def ridge_hbm_bf16(self) -> float:
        return self.peak_bf16_tflops * TERA / (self.hbm_gbps * GIGA)

    @property
    def ridge_hbm_fp8(self) -> float:
        return self.peak_fp8_tflops * TERA / (self.hbm_gbps * GIGA)

    @property
    def ridge_ici(self) -> float:
        """BF16 peak FLOP/s over bidirectional ICI bytes/s, per chip.

        This is the plain hardware ratio; the guide's own figure for TPU7x
        (~11.5k FLOP/byte, GUIDE_ICI_INTENSITY) counts per-link bandwidth and
        is what the sharding rule cites.
        """
        return self.peak_bf16_tflops * TERA / (self.ici_gbps * GIGA)

    def to_dict(self) -> dict:
        return {
            "key": self.key,
            "name": self.name,
            "peak_bf16_tflops_per_chip": self.peak_bf16_tflops,
            "peak_fp8_tflops_per_chip": self.peak_fp8_tflops,
            "peak_int8_tops_per_chip": self.peak_int8_tops,
            "low_precision_lever": self.low_precision,
            "source": self.source,
            "hbm_gib_per_chip": self.hbm_gib,
            "hbm_gbps_per_chip": self.hbm_gbps,
            "ici_gbps_per_chip": self.ici_gbps,
            "tensorcores_per_chip": self.tensorcores,
            "sparsecores_per_chip": self.sparsecores,
            "planes_per_chip": self.planes_per_chip,
            "vmem_mib_per_core": self.vmem_mib_per_core,
            "per_core": {
                "peak_bf16_tflops": round(self.core_peak_bf16_flops / TERA, 3),
                "peak_fp8_tflops": round(self.core_peak_fp8_flops / TERA, 3),
                "hbm_gbps": round(self.core_hbm_bytes_per_s / GIGA, 3),
            },
            "ridge_points_flop_per_byte": {
                "hbm_bf16": round(self.ridge_hbm_bf16, 2),
                "hbm_fp8": round(self.ridge_hbm_fp8, 2),
                "ici": round(self.ridge_ici, 2),
            },
        }




#: The guide's stated hardware arithmetic intensity against ICI (FLOP/byte).
GUIDE_ICI_INTENSITY = 11_500.0

TPU7X = Chip(
    key="tpu7x",
    name=CHIP_DISPLAY["tpu7x"],
    device_type_strings=("TPU v7x", "TPU7x", "TPU v7"),
    peak_bf16_tflops=2307.0,
    peak_fp8_tflops=4614.0,
    hbm_gib=192.0,
    hbm_gbps=7380.0,
    ici_gbps=1200.0,
    tensorcores=2,
    sparsecores=4,
    planes_per_chip=2,
    vmem_mib_per_core=64,
    mxus=8,
    mxu_dim=256,
    target_versions=("6acc60406",),
    source="Google Cloud TPU7x (Ironwood) documentation and the TPU7x performance guide; HBM 192 GiB per chip and "
           "VMEM 64 MiB per TensorCore as the XSpace facts' chip table states them (the guide rounds them to "
           "192 GB and 64 MB per chip); INT8: none published",
)

V6E = Chip(
    key="v6e",
    name=CHIP_DISPLAY["v6e"],
    device_type_strings=("TPU v6 Lite", "TPU v6e"),
    peak_bf16_tflops=918.0,
    peak_fp8_tflops=918.0,
    hbm_gib=32.0,
    hbm_gbps=1638.0,
    ici_gbps=800.0,
    tensorcores=1,
    sparsecores=2,
    planes_per_chip=1,
    vmem_mib_per_core=128,
    mxus=4,
    mxu_dim=256,
    peak_int8_tops=1836.0,
    source="Google Cloud TPU v6e documentation (BF16 918 TFLOP/s, INT8 1,836 TOPS, 32 GB HBM at 1,640 GB/s); "
           "FP8 runs at the BF16 rate",
)

V5P = Chip(
    key="v5p",
    name=CHIP_DISPLAY["v5p"],
    device_type_strings=("TPU v5", "TPU v5p"),
    peak_bf16_tflops=459.0,
    peak_fp8_tflops=459.0,
    hbm_gib=95.0,
    hbm_gbps=2765.0,
    ici_gbps=1200.0,
    tensorcores=2,
    sparsecores=4,
    planes_per_chip=1,  # megacore: one plane drives both TensorCores
    vmem_mib_per_core=64,
    mxus=8,
    mxu_dim=128,
    peak_int8_tops=918.0,
    target_versions=("VIPERFISH",),
    source="Google Cloud TPU v5p documentation (BF16 459 TFLOP/s, INT8 918 TOPS, 95 GiB HBM at 2,765 GB/s); "
           "FP8 runs at the BF16 rate",
)

V5E = Chip(
    key="v5e",
    name=CHIP_DISPLAY["v5e"],
    device_type_strings=("TPU v5 Lite", "TPU v5e", "TPU v5 litepod"),
    peak_bf16_tflops=197.0,
    peak_fp8_tflops=0.0,  # the MXU has no FP8
    hbm_gib=16.0,
    hbm_gbps=819.0,
    ici_gbps=200.0,  # 1,600 Gbps per chip
    tensorcores=1,
    sparsecores=0,
    planes_per_chip=1,
    vmem_mib_per_core=128,  # ASSUMED: as v6e (no published per-core figure found)
    #: 4 MXUs of 128x128 per TensorCore: 197e12 / (4 x 2 x 128 x 128) = 1.50 GHz
    mxus=4,
    mxu_dim=128,
    peak_int8_tops=394.0,
    target_versions=("VIPERFISH:lite",),
    replay_calibration=ReplayCalibration(
        compute=1.125, memory=1.876,
        source="fitted by tools/calibrate_replay.py on the 24 programs of sample_traces/real-tpu/ "
               "(jax 0.10.2, TPU v5 lite): medians of (cycles / clock) / measured per class; per-program ranges "
               "0.87-1.41 (compute) and 1.08-3.02 (memory)"),
    source="Google Cloud TPU v5e documentation (BF16 197 TFLOP/s, INT8 394 TOPS, 16 GB HBM at 819 GB/s, "
           "ICI 1,600 Gbps, one TensorCore, no SparseCore, no FP8 on the MXU)",
)

V4 = Chip(
    key="v4",
    name=CHIP_DISPLAY["v4"],
    device_type_strings=("TPU v4",),
    peak_bf16_tflops=275.0,
    peak_fp8_tflops=0.0,  # the MXU has no FP8
    hbm_gib=32.0,
    hbm_gbps=1200.0,
    ici_gbps=300.0,  # 6 links x 50 GB/s
    tensorcores=2,
    sparsecores=4,
    planes_per_chip=1,  # megacore
    vmem_mib_per_core=16,  # ASSUMED (no published figure found)
    #: 2 TensorCores x 4 MXUs of 128x128: 275e12 / (8 x 2 x 128 x 128) = 1.05 GHz
    mxus=8,
    mxu_dim=128,
    peak_int8_tops=275.0,
    target_versions=("PUFFERFISH",),
    source="Google Cloud TPU v4 documentation (BF16 and INT8 275 TFLOP/s, 32 GiB HBM at 1,200 GB/s)",
)

CHIPS: dict[str, Chip] = {c.key: c for c in (TPU7X, V6E, V5P, V5E, V4)}


# ---------------------------------------------------------------------------
# FP8 vs BF16 end to end: the published figures FP8 estimates are held to
# ---------------------------------------------------------------------------

#: The TPU7x guide's typical FP8 vs BF16 end-to-end gain on dense
#: matmul-heavy work ("up to 1.3x").
FP8_GUIDE_TYPICAL_SPEEDUP = 1.3
#: Where the measured figures come from.
FP8_RECIPES_SOURCE = "AI-Hypercomputer/tpu-recipes, training/ironwood/README.md"


@dataclass(frozen=True)
class Fp8Measurement:
    """One published Ironwood MaxText recipe run in BF16 and in fp8_full."""

    model: str
    chips: int
    seq_len: int
    bf16_step_s: float
    fp8_step_s: float

    @property
    def speedup(self) -> float:
        return self.bf16_step_s / self.fp8_step_s


#: The recipes' step times (seconds), bf16 vs fp8_full, same chips and shape.
FP8_MEASURED_SPEEDUPS: tuple[Fp8Measurement, ...] = (
    Fp8Measurement("llama3.1-70b", 64, 8192, 12.20, 7.93),
    Fp8Measurement("llama3.1-405b", 256, 8192, 98.34, 64.37),
    Fp8Measurement("deepseek-v3", 128, 4096, 27.02, 22.47),
    Fp8Measurement("qwen3-235b-a22b", 256, 4096, 30.87, 27.67),
)


def fp8_measured_range() -> tuple[float, float]:
    """(slowest, fastest) measured FP8 vs BF16 end-to-end speed-up."""
    s = [m.speedup for m in FP8_MEASURED_SPEEDUPS]
    return min(s), max(s)


#: No FP8 estimate promises more than the fastest measured recipe.
FP8_MAX_SPEEDUP = fp8_measured_range()[1]


def chip_by_key(key: str) -> Chip:
    try:
        return CHIPS[key.lower()]
    except KeyError:
        raise KeyError(f"unknown chip {key!r}; known: {', '.join(sorted(CHIPS))}") from None


def chip_from_device_type(device_type: str | None) -> Chip | None:
    """Recognise a chip from XProf's `device_type_string` plane stat."""
    if not device_type:
        return None
    s = device_type.strip().lower()
    for chip in CHIPS.values():
        for known in chip.device_type_strings:
            if s == known.lower():
                return chip
    if "v7" in s or "7x" in s or "ironwood" in s or re.search(r"\btpu7\b", s):
        return TPU7X
    if "v6" in s or "trillium" in s:
        return V6E
    if re.search(r"v5\s*(lite|e\b)", s):
        return V5E
    if "v5p" in s or s == "tpu v5":
        return V5P
    if re.search(r"\bv4\b", s):
        return V4
    return None


def chip_from_peaks(tflops_per_core: float, hbm_gbps_per_core: float) -> Chip | None:
    """The one chip whose per-TensorCore BF16 peak and HBM bandwidth are both
    near what a device plane states (`peak_teraflops_per_second`,
    `peak_hbm_bw_gigabytes_per_second`): within 15% and 10% (a plane states
    the clock it runs at: v5e 202.7 against 197 published; TPU7x reportedly
    1028.75 against 1153.5). None when none or several are."""
    if tflops_per_core <= 0 or hbm_gbps_per_core <= 0:
        return None
    near = [c for c in CHIPS.values()
            if abs(c.core_peak_bf16_flops / TERA / tflops_per_core - 1) <= 0.15
            and abs(c.core_hbm_bytes_per_s / GIGA / hbm_gbps_per_core - 1) <= 0.10]
    return near[0] if len(near) == 1 else None


def chip_from_tpu_version(text: str | None) -> Chip | None:
    """A chip from the `/host:metadata` plane's `tpu_version` stat
    ("PJRT C API\\nTFRT TPU v5 lite\\nBuilt on ...")."""
    if not text:
        return None
    for line in text.splitlines():
        m = re.search(r"\b(TPU\s*\S.*)$", line.strip())
        if m and "TFRT" in line:
            return chip_from_device_type(m.group(1))
    return None


def chip_from_target_arguments(text: str | None) -> Chip | None:
    """A chip from an XLA dump's target_arguments.txt (`tpu_topology_args {
    version: TPU_VERSION_VIPERFISH variant: "lite" }`)."""
    if not text:
        return None
    m = re.search(r"tpu_topology_args\s*\{[^}]*?version:\s*TPU_VERSION_([A-Za-z0-9_]+)", text, re.S)
    if not m:
        return None
    version = m.group(1).upper()
    v = re.search(r'tpu_topology_args\s*\{[^}]*?variant:\s*"([^"]*)"', text, re.S)
    key = f"{version}:{v.group(1)}".upper() if v and v.group(1) else version
    for chip in CHIPS.values():
        if key in {t.upper() for t in chip.target_versions}:
            return chip
    return None
