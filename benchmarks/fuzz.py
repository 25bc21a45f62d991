"""Fuzz benchmark: hostile inputs through the API, the command line and the app's upload parsers.

    python benchmarks/fuzz.py [--n 100000] [--seed 0] [--paths api,cli,upload]
    python benchmarks/fuzz.py --repro api:1234 [--seed 0]   # one input again, with its traceback

Inputs are the shipped specs (models, clusters, accelerators, calibration profiles, Hugging Face
configs, validation cases) with up to three mutations each: a field set to a hostile value (0,
negatives, 10**12, 10**400, 1e308, 1e-308, inf, nan, booleans, strings, lists, None) or to a
plausible but different one (non-dividing layouts, an MoE or MLA block borrowed from another
model), a field deleted, an unknown field added; files also get byte-level damage (non-UTF-8
bytes, truncation, YAML alias bombs and tags, deep nesting, NaN, Infinity and 5,000-digit
numbers, files over 1 MB). Input ``i`` of a path is drawn from ``Random(f"{seed}/{path}/{i}")``
alone, so any input can be replayed with ``--repro``.

The mix of ``--n`` (issue 12): 80 % API (``model_validate`` of every spec, then ``check_layout``
and ``simulate``; 15 % of them validation cases through ``planner.validate.run_case``), 15 % CLI
(``planner.cli.main`` in-process: simulate with flags; simulate with --model, --cluster,
--profile and --layout files; validate; import-hf), 5 % upload (``app_pages.common.read_upload``
and the parsers behind the Estimate, Calibration and Validation pages' uploaders).

Every input ends as a clean error (PlannerError; for the CLI, exit 2 with one ``error:`` line,
or argparse's usage line and error line), a finite report (every figure finite), a traceback
(any other exception, another CLI exit status, an error that is not one line) or a non-finite
figure; it is slow when it took more than 1 s. Each path runs in a child process (4 GB address
space) that the parent watches: an input still running after 10 s is killed and counted as a
hang (and slow), and a new child goes on with the next input. The output: a table per path and
kind with the peak RSS of each child, then every failure class with its first minimal repros
(mutations dropped one by one while the failure stays). Never fails the build.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import multiprocessing as mp
import os
import random
import re
import resource
import shutil
import sys
import tempfile
import time
import traceback
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

MIX = {"api": 0.80, "cli": 0.15, "upload": 0.05}
KINDS = {
    "api": {"simulate": 0.75, "extreme": 0.1, "case": 0.15},
    "cli": {"simulate": 0.45, "simulate_files": 0.2, "validate": 0.2, "import_hf": 0.15},
    "upload": {"model": 0.35, "hf": 0.2, "profile": 0.25, "cases": 0.2},
}
SLOW_S = 1.0
HANG_S = 10.0
ADDRESS_SPACE_BYTES = 4 << 30
REPROS_PER_CLASS = 3
N_MUTATIONS = {0: 0.1, 1: 0.45, 2: 0.25, 3: 0.2}

# ---- hostile and plausible values ---------------------------------------------------------------
INF, NAN = float("inf"), float("nan")
HOSTILE_NUMBERS = (0, -1, -(10**12), 10**12, 2**63, 10**400, 1e308, -1e308, 1e-308, 5e-324)
HOSTILE_NUMBERS += (INF, -INF, NAN, -0.0, 0.5, 1.5, True, False)
HOSTILE_NUMBERS += (2**16, 2**20, 2**22, 2**24, 10**9, 1e-300, 1e-9, 99_999.0, 1e9)  # near caps
# valid but extreme: every number of an "extreme" input is drawn from these (2 to 6 at once)
EXTREME_INTS = (1, 2, 3, 7, 10_000, 65_536, 2**20, 2**22, 2**24)
EXTREME_FLOATS = (1e-12, 1e-6, 1e-3, 1.0, 1e3, 16_384.0, 99_999.0)
HOSTILE_OTHER = (None, "", "8", "nan", "inf", "1e400", "x", [], [8], {}, {"a": 1})
HOSTILE_STRINGS = ("", "x" * 10_000, "\u202egnp.", "\ud800", "../../../etc/passwd", "/dev/zero")
HOSTILE_STRINGS += (8, 1e308, None, [], {})
HOSTILE_ARGS = ("0", "-1", "-8", "1000000000000", "9" * 30, "9" * 5000, "1e3", "8.0", "nan")
HOSTILE_ARGS += ("inf", "-inf", "1e308", "1e-320", "", " ", "0x10", "\u0668", "\uff11\uff16")
HOSTILE_ARGS += ("1_024", "abc", "--json", "-", "\x00", "/dev/zero", "/dev/null", "{tmp}")
HOSTILE_ARGS += ("/nonexistent/x.yaml", "{tmp}/loop.yaml", "/etc/passwd", "{tmp}/missing.json")
OUTPUT_ARGS = ("{tmp}", "/nonexistent/dir/out.json", "/dev/full", "{tmp}/out.json", "")
EXTRA_DONORS: dict[str, list[Any]] = {
    "vpp": [1, 2, 3, 4],
    "schedule": ["1f1b", "interleaved", None],
    "zero": [0, 1, 2, 3],
    "recompute": ["none", "selective", "full"],
    "recompute_modules": [["core_attn"], ["mla_up_proj", "moe_act"], ["moe", "shared_experts"], []],
    "recompute_fraction": [0.25, 0.5, 1.0, 0.0, 1.5, -0.5, float("nan"), None],
    "precision": ["bf16", "fp16", "fp8", "fp32"],
    "attention_kernel": ["fused", "cudnn", "flash2", "flash_triton", "unfused"],
    "cross_entropy": ["fp32_copy", "in_place"],
    "grad_reduce_dtype": ["fp32", "bf16"],
    "offload_layers": [1, 4, 31, 79],
    "notes": ["offloads activations of 100000000000000000000 layers", "with MTP"],
    "source": ["Foo et al. 2021", "Bar 2099"],
    "framework": ["nemo", "megatron-lm", "megatron-bridge", "llm-foundry", "megatron-deepspeed"],
    "window": [1, 128, 4096],
    "cluster": ["dgx-h100", "/dev/zero", "../../../etc/passwd", "dgx-h100.yaml", ""],
}
SIM_FLAGS = ("--gpus", "--tp", "--pp", "--dp", "--cp", "--ep", "--vpp", "--micro-batch")
SIM_FLAGS += ("--global-batch", "--seq-len", "--recompute", "--recompute-modules", "--zero")
SIM_FLAGS += ("--precision", "--attention-kernel", "--grad-reduce-dtype", "--offload-layers")
SIM_FLAGS += ("--cross-entropy", "--schedule", "--host-op-us", "--profile", "--layout", "--trace")
SIM_FLAGS += ("--stack", "--unknown", "--execution", "--unfused-elementwise")
UNKNOWN_KNOBS = ("micro_batch", "vpp,zero", "recompute", "micro_batch,vpp,recompute,zero")
OPAQUE = {"raw", "metadata", "sources", "description"}  # free-form: mutate whole, not inside
# a non-finite number as a table cell, a "key: value" or a YAML value (not "not inf or nan")
NON_FINITE_TEXT = re.compile(r"(?:[│|:=]|^)\s*[-+]?\.?(?:nan|inf|infinity)(?!\w)", re.I | re.M)


CASE_FILES = (
    REPO / "calibration" / "validation" / "public.yaml",  # the shipped copy of shared/validation
    REPO / "calibration" / "validation" / "heldout_moe.yaml",
    REPO / "benchmarks" / "heldout" / "bridge_archive_moe.yaml",
)
SYNTHETIC_CASE = {  # when no case file is there (the model is added)
    "id": "synthetic",
    "source": "fuzz",
    "quality": "partial",
    "cluster": "dgx-h100",
    "num_gpus": 8,
    "layout": {"tp": 1, "pp": 1, "dp": 8},
    "training": {"seq_len": 4096, "global_batch": 64},
    "measured": {"tokens_per_s_per_gpu": 10_000.0},
}


def _short(value: Any) -> str:
    """A value as a repro line shows it (10**400, not 401 digits)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**15:
        sign = "-" if value < 0 else ""
        for base in (10, 2):
            k = round(math.log(abs(value), base))
            if base**k == abs(value):
                return f"{sign}{base}**{k}"
        return f"<int of {len(str(abs(value)))} digits>"
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:40]}...<{len(text)} chars>"


def _path_text(path: tuple) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)


@dataclass(frozen=True)
class Mut:
    """One mutation of a component: set, delete or add a field, or damage the file's bytes."""

    target: str
    path: tuple
    op: str  # set | del | add | bytes
    value: Any = None

    def text(self) -> str:
        where = self.target + _path_text(self.path)
        if self.op == "del":
            return f"del {where}"
        if self.op == "bytes":
            return f"{self.target} file: {self.value[0]}"
        return f"{where} = {_short(self.value)}" + ("  (added)" if self.op == "add" else "")


def _copy(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _copy(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_copy(v) for v in obj]
    return obj


def _get(obj: Any, path: tuple) -> Any:
    for key in path:
        obj = obj[key]
    return obj


def _node_paths(doc: Any) -> list[tuple]:
    """Paths of every node below the root (free-form fields are leaves)."""
    out, stack = [], [(doc, ())]
    while stack:
        node, path = stack.pop()
        if path:
            out.append(path)
        if path and path[-1] in OPAQUE:
            continue
        if isinstance(node, dict):
            stack.extend((v, path + (k,)) for k, v in node.items() if k != "_cmd")
        elif isinstance(node, list):
            stack.extend((v, path + (i,)) for i, v in enumerate(node))
    return out


def apply(comps: dict, mut: Mut) -> None:
    """Apply ``mut`` in place (a path that a previous mutation removed is skipped)."""
    if mut.op == "bytes":
        comps.setdefault("_bytes", {}).setdefault(mut.target, []).append(mut.value)
        return
    if not mut.path:
        comps[mut.target] = _copy(mut.value)
        return
    try:
        parent = _get(comps[mut.target], mut.path[:-1])
        if mut.op == "del":
            del parent[mut.path[-1]]
        elif isinstance(parent, list) and mut.op == "add":
            parent.append(_copy(mut.value))
        else:
            parent[mut.path[-1]] = _copy(mut.value)
    except (KeyError, IndexError, TypeError):
        pass


def _hostile(rng: Any, current: Any, target: str) -> Any:
    if target == "argv":
        return rng.choice(HOSTILE_ARGS)
    if isinstance(current, str):
        return rng.choice(HOSTILE_STRINGS)
    return rng.choice(HOSTILE_NUMBERS + HOSTILE_OTHER)


def _plausible(rng: Any, current: Any, key: Any, donors: dict) -> Any:
    pool = donors.get(key)
    if pool and (current is None or isinstance(current, str | dict | list) or rng.random() < 0.3):
        return rng.choice(pool)
    if isinstance(current, bool):
        return not current
    if isinstance(current, int):
        return max(
            1, rng.choice((current * 2, current // 2, current + 1, current - 1, current * 3))
        )
    if isinstance(current, float):
        return current * rng.choice((0.5, 2.0, 0.9, 1.1, 10.0, 0.1))
    if isinstance(current, str) and current.isdigit() and len(current) < 20:  # a CLI flag
        return str(max(1, int(current) * rng.choice((2, 3)) // rng.choice((1, 2, 4))))
    if isinstance(current, list) and current:
        return rng.choice((current[:-1], current + current[:1], current[::-1]))
    return rng.choice((1, 8, 64, "x"))


def mutation(rng: Any, comps: dict, target: str, donors: dict, fields: dict) -> Mut:
    """One random mutation of ``comps[target]`` (as it stands after the previous ones): 12 %
    add a field (a known one it lacks, or an unknown one), 10 % delete one, else set one to a
    hostile or a plausible value (half each)."""
    doc = comps[target]

    def value(current: Any, key: Any) -> Any:
        if target == "argv" and key in ("--trace", "-o"):
            return rng.choice(OUTPUT_ARGS)
        if rng.random() < 0.5:
            return _hostile(rng, current, target)
        return _plausible(rng, current, key, donors)

    paths = _node_paths(doc) if isinstance(doc, dict | list) else []
    if not isinstance(doc, dict) and not paths:  # a bare value (gpus), or an emptied list
        return Mut(target, (), "set", value(doc, target))
    r = rng.random()
    if isinstance(doc, dict) and (r < 0.12 or not paths):
        dicts = [p for p in paths if isinstance(_get(doc, p), dict) and p[-1] not in OPAQUE]
        where = rng.choice([(), *dicts])
        missing = [f for f in fields.get(target, ()) if f not in doc] if not where else []
        if missing and rng.random() < 0.7:
            key = rng.choice(missing)
        else:
            key = rng.choice(("--fuzz-unknown", "-x")) if target == "argv" else "fuzz_unknown"
        return Mut(target, where + (key,), "add", value(None, key))
    path = rng.choice(paths)
    if r < 0.22:
        return Mut(target, path, "del")
    key = next((p for p in reversed(path) if isinstance(p, str)), None)
    return Mut(target, path, "set", value(_get(doc, path), key))


# ---- byte-level damage of a file ----------------------------------------------------------------
NUMBER = re.compile(rb"(?<=[\s:\[,])-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?=[\s,\]}]|$)")
VALUE = re.compile(rb"(?m)(?<=: )[^\n]+$")
BAD_NUMBERS = (b"NaN", b"Infinity", b"-Infinity", b"1e999", b"1.0e+999", b".nan", b"-.inf")
BAD_NUMBERS += (b"9" * 5000, b"1" + b"0" * 400, b"1e-400", b"-0")
YAML_VALUES = (b"!!binary aGVsbG8=", b"!!timestamp 2001-12-14", b"2001-12-14", b"!!set {a, b}")
YAML_VALUES += (b"!!python/name:os.system", b"!!float nan", b"0o17", b"0x1F", b"1_000", b"~")
YAML_VALUES += (b"yes", b"'8'", b"*undefined", b"&x 8", b"{}", b'"\\ud800"', b'"\\x00"')


def _one_of(pattern: re.Pattern, data: bytes, rng: Any, new: bytes) -> bytes:
    found = list(pattern.finditer(data))
    if not found:
        return data + b"\n" + new
    m = rng.choice(found)
    return data[: m.start()] + new + data[m.end() :]


def _insert(data: bytes, rng: Any, blob: bytes) -> bytes:
    pos = rng.randrange(len(data) + 1)
    return data[:pos] + blob + data[pos:]


def _alias_bomb() -> bytes:
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{i}: &a{i} [{','.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
    return ("\n".join(lines) + "\n").encode()


def _fanout(doc: Any, rng: Any) -> bytes:
    """One case and N aliases of it: a small file that runs N cases."""
    first = doc[0] if isinstance(doc, list) and doc else doc
    n = rng.choice((100, 3_000, 10_000, 20_000))
    return b"- &c " + json.dumps(first).encode() + b"\n" + b"- *c\n" * n


DAMAGE: dict[str, Any] = {
    "non_utf8": lambda d, r, doc: _insert(d, r, b"\xff\xfe\xc3("),
    "latin1": lambda d, r, doc: _insert(d, r, "é".encode("latin-1")),
    "nul_byte": lambda d, r, doc: _insert(d, r, b"\x00"),
    "truncated": lambda d, r, doc: d[: r.randrange(len(d) + 1)],
    "bom": lambda d, r, doc: b"\xef\xbb\xbf" + d,
    "crlf": lambda d, r, doc: d.replace(b"\n", b"\r\n"),
    "tabs": lambda d, r, doc: d.replace(b"\n  ", b"\n\t"),
    "empty": lambda d, r, doc: b"",
    "null": lambda d, r, doc: b"null",
    "scalar": lambda d, r, doc: b"42",
    "top_list": lambda d, r, doc: b"[1, 2]",
    "alias_bomb": lambda d, r, doc: _alias_bomb(),
    "self_alias": lambda d, r, doc: b"&a [*a]\n",
    "deep_flow": lambda d, r, doc: b"[" * 100_000 + b"]" * 100_000,
    "deep_block": lambda d, r, doc: "\n".join(" " * i + "a:" for i in range(500)).encode() + b" 1",
    "deep_json": lambda d, r, doc: b'{"a":' * 100_000 + b"1" + b"}" * 100_000,
    "over_1mb": lambda d, r, doc: d + b"\n" + b" " * 1_000_001,
    "near_1mb": lambda d, r, doc: d + b"\nfuzz_pad: [" + b"0," * 495_000 + b"0]\n",
    "long_string": lambda d, r, doc: _one_of(VALUE, d, r, b'"' + b"x" * 900_000 + b'"'),
    "bad_number": lambda d, r, doc: _one_of(NUMBER, d, r, r.choice(BAD_NUMBERS)),
    "yaml_value": lambda d, r, doc: _one_of(VALUE, d, r, r.choice(YAML_VALUES)),
    "python_tag": lambda d, r, doc: b"!!python/object/apply:os.getcwd []\n",
    "dup_key": lambda d, r, doc: d + b"\n" + d.split(b"\n", 1)[0],
    "case_fanout": lambda d, r, doc: _fanout(doc, r),
}
DAMAGE_NAMES = tuple(k for k in DAMAGE if k != "case_fanout")


def damage(data: bytes, doc: Any, name: str, seed: int) -> bytes:
    """``data`` with the damage ``name``, drawn from ``seed``."""
    return DAMAGE[name](data, random.Random(seed), doc)


# ---- the corpus and the inputs ------------------------------------------------------------------
@dataclass
class Input:
    """One fuzz input: base components, the mutations, and what the base was."""

    path: str
    index: int
    kind: str
    base: dict
    muts: list[Mut]
    meta: str
    comps: dict = field(default_factory=dict)  # base with every mutation applied

    def describe(self, muts: list[Mut] | None = None) -> str:
        muts = self.muts if muts is None else muts
        body = [f"    {m.text()}" for m in muts] or ["    (no mutation)"]
        return "\n".join([f"{self.path}:{self.index} [{self.kind}] {self.meta}", *body])


def materialize(inp: Input, muts: list[Mut]) -> tuple[dict, set[str]]:
    """The base components with ``muts`` applied (only the mutated ones are copied)."""
    comps = dict(inp.base)
    mutated = {m.target for m in muts}
    for name in mutated:
        comps[name] = _copy(comps[name])
    for m in muts:
        apply(comps, m)
    return comps, mutated


def _weighted(rng: Any, weights: dict) -> Any:
    return rng.choices(list(weights), weights=list(weights.values()))[0]


class Context:
    """What a worker loads once: the shipped specs as dicts and objects, donors, a temp dir."""

    def __init__(self, path: str, root: str | None = None) -> None:
        import yaml

        import planner
        from planner.specs.loading import CLUSTERS_DIR, MODELS_DIR, shipped_ids

        self.planner = planner
        self.yaml = yaml
        self.tmp = Path(tempfile.mkdtemp(prefix=f"{path}-", dir=root))
        loop = self.tmp / "loop.yaml"
        with contextlib.suppress(OSError):
            loop.symlink_to(loop)
        self.models, self.model_dicts = {}, {}
        for mid in shipped_ids(MODELS_DIR):
            with contextlib.suppress(Exception):
                self.models[mid] = planner.load_model(mid)
                self.model_dicts[mid] = self.models[mid].model_dump(mode="json")
        self.clusters, self.cluster_dicts, self.cluster_profile = {}, {}, {}
        for cid in shipped_ids(CLUSTERS_DIR):
            with contextlib.suppress(Exception):
                cl = planner.load_cluster(cid)
                self.clusters[cid] = cl
                self.cluster_dicts[cid] = (
                    cl.spec.model_dump(mode="json"),
                    cl.accelerator.model_dump(mode="json"),
                )
                self.cluster_profile[cid] = cl.spec.profile or cl.accelerator.profile
        self.profiles, self.profile_dicts = {}, {}
        for p in sorted((REPO / "calibration" / "profiles").glob("*.json")):
            with contextlib.suppress(Exception):
                self.profile_dicts[p.stem] = json.loads(p.read_text())
                self.profiles[p.stem] = planner.load_profile(p.stem)
        self.hf = {
            p.stem: json.loads(p.read_text()) for p in (REPO / "models" / "hf").glob("*.json")
        }
        self.cases = []
        for f in CASE_FILES:
            with contextlib.suppress(Exception):
                self.cases += [c for c in yaml.safe_load(f.read_text()) if isinstance(c, dict)]
        self.cases = self.cases or [SYNTHETIC_CASE | {"model": self.model_dicts["llama3.1-8b"]}]
        self.model_ids, self.cluster_ids = sorted(self.models), sorted(self.clusters)
        self.stack_ids = sorted(p.stem for p in (REPO / "stacks").glob("*.yaml"))
        self.donors = self._donors()
        self.schedules = _literals(planner.Layout.model_fields["schedule"].annotation)
        self.fields = {
            "layout": list(planner.Layout.model_fields),
            "training": list(planner.Training.model_fields),
            "argv": list(SIM_FLAGS),
        }
        self.cli = self.common = None
        if path == "cli":
            from planner import cli

            self.cli = cli
        if path == "upload":
            import logging

            logging.getLogger("streamlit").setLevel(logging.CRITICAL)
            import app_pages.common as common

            self.common = common
            self.validation_page = _page_module("validation")

    def _donors(self) -> dict[str, list]:
        seen: dict[str, dict[str, Any]] = defaultdict(dict)
        docs = [*self.model_dicts.values(), *self.profile_dicts.values(), *self.hf.values()]
        docs += [x for pair in self.cluster_dicts.values() for x in pair] + self.cases
        stack = list(docs)
        while stack:
            node = stack.pop()
            items = node.items() if isinstance(node, dict) else enumerate(node)
            for k, v in items:
                if isinstance(k, str) and k not in OPAQUE and len(seen[k]) < 12:
                    seen[k].setdefault(repr(v)[:200], v)
                if isinstance(v, dict | list):
                    stack.append(v)
        donors = {k: list(v.values()) for k, v in seen.items()}
        for k, v in EXTRA_DONORS.items():
            donors[k] = donors.get(k, []) + v
        for cls in (self.planner.Layout, self.planner.Training):  # every Literal's values
            for name, f in cls.model_fields.items():
                donors[name] = donors.get(name, []) + _literals(f.annotation)
        return donors

    def profile_for(self, cluster: Any) -> Any:
        return self.planner.default_profile(cluster)


def _literals(annotation: Any) -> list:
    """The values of every ``Literal`` inside a type annotation."""
    if get_origin(annotation) is Literal:
        return list(get_args(annotation))
    return [v for arg in get_args(annotation) for v in _literals(arg)]


def plausible_job(rng: Any, m: dict, schedules: list) -> tuple[dict, dict, int]:
    """A layout and training that are mostly legal for model ``m`` (a model dict)."""
    heads, layers = m["heads"], m["layers"]
    kv = m.get("kv_heads") or heads
    tp = rng.choice([t for t in (1, 2, 4, 8) if heads % t == 0 and (m.get("mla") or kv % t == 0)])
    pp = rng.choice([p for p in (1, 2, 4, 8) if p <= layers])
    cp, dp = rng.choice((1, 1, 1, 2)), rng.choice((1, 2, 4, 8, 16, 64))
    layout: dict[str, Any] = {"tp": tp, "pp": pp, "dp": dp, "cp": cp}
    if m.get("moe"):
        experts, grid = m["moe"]["experts"], tp * dp * cp
        layout["ep"] = rng.choice([e for e in (1, 2, 4, 8, 16, 64) if experts % e + grid % e == 0])
    if pp > 1 and layers >= 2 * pp and rng.random() < 0.3:
        layout["vpp"] = 2
    if tp > 1 and rng.random() < 0.6:
        layout["sequence_parallel"] = True
    if pp > 1 and schedules and rng.random() < 0.15:
        layout["schedule"] = rng.choice(schedules)
    layout["zero"] = rng.choice((0, 1, 1, 2, 3))
    if layout["zero"] and dp * cp > 1 and rng.random() < 0.1:  # hybrid sharding
        layout["dp_shard"] = rng.choice([d for d in (1, 2, 4, 8) if (dp * cp) % d == 0])
    for flag in ("overlap_tp_comm", "overlap_ep_comm", "pp_scatter_gather"):
        if rng.random() < 0.15:
            layout[flag] = True
    micro = rng.choice((1, 1, 2, 4))
    training: dict[str, Any] = {
        "seq_len": rng.choice((1024, 2048, 4096, 8192)),
        "global_batch": micro * dp * rng.choice((1, 2, 8, 32)),
        "micro_batch": micro,
        "recompute": rng.choice(("none", "none", "selective", "full")),
    }
    if training["recompute"] == "selective" and rng.random() < 0.3:
        training["recompute_modules"] = rng.choice(EXTRA_DONORS["recompute_modules"][:3])
    if training["recompute"] == "full" and rng.random() < 0.3:  # a share of the layers
        training["recompute_fraction"] = rng.choice((0.1, 0.25, 0.5, 0.75))
    for key, p in (("precision", 0.3), ("attention_kernel", 0.2), ("cross_entropy", 0.1)):
        if rng.random() < p:
            training[key] = rng.choice(EXTRA_DONORS[key])
    if pp == 1 and training["recompute"] == "none" and layers > 1 and rng.random() < 0.05:
        training["offload_layers"] = rng.randint(1, layers - 1)
    return layout, training, tp * pp * cp * dp


def _draw_muts(rng: Any, comps: dict, targets: dict, ctx: Context, files: tuple = ()) -> list:
    """Mutations drawn one after another on ``comps`` (copied on first touch, in place)."""
    muts, touched = [], set()
    for _ in range(_weighted(rng, N_MUTATIONS)):
        target = _weighted(rng, targets)
        if target not in touched:
            comps[target] = _copy(comps[target])
            touched.add(target)
        if target in files and rng.random() < 0.3:
            names = DAMAGE_NAMES + (("case_fanout",) if target == "cases" else ())
            mut = Mut(target, (), "bytes", (rng.choice(names), rng.randrange(2**31)))
        else:
            mut = mutation(rng, comps, target, ctx.donors, ctx.fields)
        apply(comps, mut)
        muts.append(mut)
    return muts


def _extreme_muts(rng: Any, comps: dict, targets: dict) -> list[Mut]:
    """2 to 6 numbers of the specs set to valid but extreme values (tiny, huge, 1)."""
    muts, touched = [], set()
    for _ in range(rng.randint(2, 6)):
        target = _weighted(rng, targets)
        if target not in touched:
            comps[target] = _copy(comps[target])
            touched.add(target)
        doc = comps[target]
        if isinstance(doc, int):
            mut = Mut(target, (), "set", rng.choice(EXTREME_INTS))
        else:
            leaves = [p for p in _node_paths(doc) if type(_get(doc, p)) in (int, float)]
            if not leaves:
                continue
            path = rng.choice(leaves)
            pool = EXTREME_INTS if type(_get(doc, path)) is int else EXTREME_FLOATS
            mut = Mut(target, path, "set", rng.choice(pool))
        apply(comps, mut)
        muts.append(mut)
    return muts


def _api_base(rng: Any, ctx: Context) -> tuple[dict, str]:
    mid, cid = rng.choice(ctx.model_ids), rng.choice(ctx.cluster_ids)
    layout, training, gpus = plausible_job(rng, ctx.model_dicts[mid], ctx.schedules)
    spec, acc = ctx.cluster_dicts[cid]
    pid = ctx.cluster_profile[cid]
    base = {"model": ctx.model_dicts[mid], "cluster": spec, "accelerator": acc}
    base |= {"profile": ctx.profile_dicts.get(pid, {}), "layout": layout, "training": training}
    base |= {"gpus": gpus, "_ids": {"model": mid, "cluster": cid, "profile": pid}}
    return base, f"model={mid} cluster={cid} gpus={gpus} layout={layout} training={training}"


def _argv_from(layout: dict, training: dict, gpus: int) -> dict:
    argv: dict[str, Any] = {"_cmd": "simulate", "--gpus": str(gpus)}
    for key, value in {**layout, **training}.items():
        flag = "--" + key.replace("_", "-")
        if key in ("overlap_tp_comm", "overlap_ep_comm"):
            flag = "--" + key.replace("_comm", "").replace("_", "-")
        if isinstance(value, bool):
            argv[flag] = value
        elif isinstance(value, list):
            argv[flag] = ",".join(value)
        elif key != "overlap_dp_grad_reduce":
            argv[flag] = str(value)
    return argv


def generate(ctx: Context, path: str, seed: int, index: int) -> Input:
    """Input ``index`` of ``path``: a function of (seed, path, index) and the shipped specs."""
    rng = random.Random(f"{seed}/{path}/{index}")
    kind = _weighted(rng, KINDS[path])
    files: tuple = ()
    if path == "api" and kind in ("simulate", "extreme"):
        base, meta = _api_base(rng, ctx)
        targets = {"model": 35, "layout": 15, "training": 15, "cluster": 8, "accelerator": 8}
        targets |= {"profile": 14, "gpus": 5}
    elif kind in ("case", "cases", "validate"):
        picked = [rng.choice(ctx.cases) for _ in range(rng.choice((1, 1, 2)))]
        meta = "cases " + ", ".join(str(c.get("id")) for c in picked)
        if path == "api":
            base, targets = {"case": picked[0]}, {"case": 1}
        elif path == "upload":
            base, targets, files = {"cases": picked}, {"cases": 1}, ("cases",)
        else:
            argv = {"_cmd": "validate", "_file": "@cases"}
            argv |= {
                "--json": rng.random() < 0.6,
                "--profile": rng.choice((None, None, None, "@profile")),
            }
            pid = rng.choice(sorted(ctx.profile_dicts))
            base = {"argv": argv, "cases": picked, "profile": ctx.profile_dicts[pid]}
            targets, files = {"argv": 2, "cases": 6, "profile": 1}, ("cases", "profile")
    elif path == "upload":
        if kind == "model":
            mid = rng.choice(ctx.model_ids)
            base, meta = {"model": ctx.model_dicts[mid]}, f"model={mid}"
        elif kind == "hf":
            hid = rng.choice(sorted(ctx.hf))
            base, meta = {"hf": ctx.hf[hid]}, f"config={hid}.json"
        else:
            pid = rng.choice(sorted(ctx.profile_dicts))
            base, meta = {"profile": ctx.profile_dicts[pid]}, f"profile={pid}"
        targets, files = {kind: 1}, (kind,)
    elif kind == "import_hf":
        hid = rng.choice(sorted(ctx.hf))
        argv = {"_cmd": "import-hf", "_config": "@hf", "--name": None, "--force": False}
        if rng.random() < 0.4:
            argv |= {"-o": "{tmp}/imported.yaml", "--force": rng.random() < 0.5}
        base, meta = {"argv": argv, "hf": ctx.hf[hid]}, f"config={hid}.json"
        targets, files = {"argv": 1, "hf": 3}, ("hf",)
    else:  # cli simulate (flags) or simulate_files
        job, meta = _api_base(rng, ctx)
        ids = job["_ids"]
        argv = _argv_from(job["layout"], job["training"], job["gpus"])
        argv |= {"--model": ids["model"], "--cluster": ids["cluster"], "--json": rng.random() < 0.7}
        if rng.random() < 0.05:
            argv["--trace"] = "{tmp}/trace.json"
        if rng.random() < 0.05:
            argv["--host-op-us"] = rng.choice(("0", "35", "1000"))
        if rng.random() < 0.3:  # a software stack (planner/stacks.py), or none
            argv["--stack"] = rng.choice((*ctx.stack_ids, "none"))
        if rng.random() < 0.1:  # unstated knobs (planner/unknowns.py)
            argv["--unknown"] = rng.choice(UNKNOWN_KNOBS)
        base, targets = {"argv": argv}, {"argv": 1}
        if kind == "simulate_files":
            argv["--model"], argv["--cluster"] = "@model", "@cluster"
            base["model"] = job["model"]
            base["cluster"] = {**job["cluster"], "accelerator": "@accelerator"}
            base["accelerator"] = job["accelerator"]
            targets = {"argv": 2, "model": 3, "cluster": 1, "accelerator": 1}
            if rng.random() < 0.4:
                argv["--profile"] = "@profile"
                base["profile"], targets["profile"] = job["profile"], 1
            if rng.random() < 0.4:
                base["layout_file"] = {"model": ids["model"], "gpus": job["gpus"]}
                base["layout_file"] |= {"layout": job["layout"], "training": job["training"]}
                argv = {k: v for k, v in argv.items() if k not in SIM_FLAGS or k == "--profile"}
                argv["--layout"], targets["layout_file"] = "@layout_file", 1
            files = tuple(k for k in base if k != "argv")
        base["argv"] = argv
    comps = dict(base)
    if kind == "extreme":
        muts = _extreme_muts(rng, comps, targets)
    else:
        muts = _draw_muts(rng, comps, targets, ctx, files)
    return Input(path, index, kind, base, muts, meta, comps)


# ---- running one input --------------------------------------------------------------------------
class Clean(Exception):
    """The input was refused with a clean one-line error."""


class Unclean(Exception):
    """Output that is neither a report nor a clean error: (class, detail)."""


FORMATS = {"model": "yaml", "cluster": "yaml", "accelerator": "yaml", "layout_file": "yaml"}
FORMATS |= {"cases": "yaml", "profile": "json", "hf": "json"}


def file_bytes(ctx: Context, comps: dict, name: str, paths: dict | None = None) -> bytes:
    """A component as the bytes of its file (``@other`` replaced by that file's path)."""

    def subst(obj: Any) -> Any:
        if isinstance(obj, dict):
            return {k: subst(v) for k, v in obj.items()}
        if isinstance(obj, list):
            return [subst(v) for v in obj]
        if isinstance(obj, str) and obj.startswith("@") and paths and obj[1:] in paths:
            return str(paths[obj[1:]])
        return obj

    doc = subst(comps[name])
    if FORMATS[name] == "json":
        text = json.dumps(doc, indent=1)
    else:
        text = ctx.yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=1000)
    data = text.encode("utf-8", "surrogatepass")
    for dmg, seed in comps.get("_bytes", {}).get(name, ()):
        data = damage(data, comps[name], dmg, seed)
    return data


def report_figures(d: dict) -> dict[str, Any]:
    """The figures of a StepReport (as a dict) that must be finite."""
    keys = ("step_time_s", "tokens_per_s", "tokens_per_s_per_gpu", "mfu_pct", "hfu_pct")
    keys += ("peak_memory_gib", "model_flops_per_token", "usable_memory_gib", "tokens_per_step")
    out = {k: d.get(k) for k in keys}
    for group in ("time_breakdown_s", "memory_breakdown_gib"):
        out |= {f"{group}.{k}": v for k, v in (d.get(group) or {}).items()}
    return out


def case_figures(cases: list[dict], summary: dict | None = None) -> dict[str, Any]:
    ok = [c for c in cases if c.get("status") != "error"]
    if not ok:
        raise Clean(cases[0]["reason"] if cases else "no cases")
    keys = ("predicted_tokens_per_s_per_gpu", "error_pct", "predicted_mfu_pct")
    keys += ("predicted_peak_memory_gib",)
    out = {f"case.{k}": c.get(k) for c in ok for k in keys}
    return out | {f"summary.{k}": v for k, v in (summary or {}).items()}


def _spec(ctx: Context, comps: dict, mutated: set, name: str, cls: Any, cache: dict) -> Any:
    from pydantic import ValidationError

    from planner.errors import pydantic_error_to_planner

    if name not in mutated and "_ids" in comps and comps["_ids"].get(name) in cache:
        return cache[comps["_ids"][name]]
    try:
        return cls.model_validate(comps[name])
    except ValidationError as exc:
        raise pydantic_error_to_planner(exc, name) from None


def run_api(ctx: Context, kind: str, comps: dict, mutated: set) -> dict:
    pl = ctx.planner
    if kind == "case":
        from planner.validate import run_case

        return case_figures([run_case(comps["case"], ctx.profile_for)])
    from planner.specs.hardware import Cluster

    model = _spec(ctx, comps, mutated, "model", pl.ModelSpec, ctx.models)
    if mutated & {"cluster", "accelerator"}:
        cluster = Cluster(
            id="fuzz",
            spec=_spec(ctx, comps, mutated, "cluster", pl.ClusterSpec, {}),
            accelerator=_spec(ctx, comps, mutated, "accelerator", pl.AcceleratorSpec, {}),
        )
    else:
        cluster = ctx.clusters[comps["_ids"]["cluster"]]
    profile = _spec(ctx, comps, mutated, "profile", pl.CalibrationProfile, ctx.profiles)
    layout = _spec(ctx, comps, mutated, "layout", pl.Layout, {})
    training = _spec(ctx, comps, mutated, "training", pl.Training, {})
    pl.check_layout(model, cluster, layout, training, gpus=comps["gpus"])
    return report_figures(pl.simulate(model, cluster, layout, training, profile).to_dict())


def _app_report(ctx: Context, model: Any, profile: Any = None) -> dict:
    """What the Estimate page shows for an uploaded model (on 8 H100s), or for the Calibration
    page's uploaded profile (Llama 3.1 8B on 8 GPUs of the profile's accelerator): the layout
    checked, then ``planner.simulate`` and the app's ``check_report``."""
    pl, c = ctx.planner, ctx.common
    model = model or ctx.models["llama3.1-8b"]
    cid = "dgx-h100"
    if profile is not None:
        same = [k for k, cl in ctx.clusters.items() if cl.spec.accelerator == profile.accelerator]
        cid = same[0] if same else cid
        if hasattr(c, "use_profile"):
            profile = c.use_profile(profile, ctx.clusters[cid])
    cluster = ctx.clusters[cid]
    gpus = min(8, cluster.spec.gpus_per_node)
    layout, training = pl.Layout(dp=gpus), pl.Training(seq_len=4096, global_batch=8 * gpus)
    pl.check_layout(model, cluster, layout, training, gpus=gpus)
    report = pl.simulate(model, cluster, layout, training, profile)
    return report_figures(getattr(c, "check_report", lambda r: r)(report).to_dict())


def _page_module(name: str) -> Any:
    """An app page's module without running the page (its top-level calls are left out)."""
    import ast
    import types

    file = REPO / "app_pages" / f"{name}.py"
    tree = ast.parse(file.read_text())
    tree.body = [
        n for n in tree.body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Call))
    ]
    module = types.ModuleType(f"app_pages.{name}")
    module.__file__ = str(file)
    exec(compile(tree, str(file), "exec"), module.__dict__)  # noqa: S102 - our own page
    return module


@dataclass
class _Upload:
    name: str
    data: bytes

    def getvalue(self) -> bytes:
        return self.data


def run_upload(ctx: Context, kind: str, comps: dict, mutated: set) -> dict:
    """The Estimate (model YAML, config.json), Calibration (profile JSON) and Validation
    (cases YAML) uploads, as the pages read them."""
    c = ctx.common
    name = {"model": "model.yaml", "hf": "config.json", "profile": "profile.json"}.get(kind)
    upload = _Upload(name or "cases.yaml", file_bytes(ctx, comps, kind))
    if kind in ("model", "hf"):
        text = c.read_upload(upload, "model")
        parse = getattr(c.parse_model_upload, "__wrapped__", c.parse_model_upload)
        spec, _notes = parse(text, hf=kind == "hf", name=None)
        return _app_report(ctx, spec)
    if kind == "profile":
        return _app_report(ctx, None, c.parse_profile_text(c.read_upload(upload, "profile")))
    text = c.read_upload(upload, "FILE")
    run = ctx.validation_page.uploaded_results
    result = getattr(run, "__wrapped__", run)(text, "fuzz", ctx.profile_for)
    if "error" in result:
        raise Clean(result["error"])
    return case_figures(result["cases"], result["summary"])


def _argv(comps: dict, files: dict, tmp: Path) -> list[str]:
    out = [comps["argv"]["_cmd"]]
    for key, value in comps["argv"].items():
        if key == "_cmd" or value is None or value is False:
            continue
        if isinstance(value, str) and value.startswith("@") and value[1:] in files:
            value = str(files[value[1:]])
        text = str(value).replace("{tmp}", str(tmp))
        out += [text] if key.startswith("_") else [key] if value is True else [key, text]
    return out


OUTPUT_FLAGS = ("--trace", "-o", "--out")
WRITABLE_DEVICES = ("/dev/full", "/dev/null")


def _confined(argv: list[str], tmp: Path) -> list[str]:
    """``argv`` with every output path (--trace, -o) inside ``tmp`` (or a device that keeps
    nothing, or a directory that does not exist): the fuzz never writes anywhere else."""
    out = list(argv)
    for i, token in enumerate(out[:-1]):
        if token in OUTPUT_FLAGS:
            target = Path(tmp, out[i + 1]).resolve()  # relative: the worker's cwd is tmp
            inside = target == tmp.resolve() or tmp.resolve() in target.parents
            if not (inside or out[i + 1] in WRITABLE_DEVICES or not target.parent.exists()):
                out[i + 1] = str(tmp / "out.json")
    return out


def _usage_error(lines: list[str]) -> bool:
    return bool(lines) and lines[0].startswith("usage:") and ": error: " in lines[-1]


def run_cli(ctx: Context, kind: str, comps: dict, mutated: set, echo: bool = False) -> dict:
    """``planner.cli.main`` in this process, in the worker's own directory (emptied first)."""
    for old in ctx.tmp.iterdir():
        if old.is_dir() and not old.is_symlink():
            shutil.rmtree(old, ignore_errors=True)
        elif old.name != "loop.yaml":
            old.unlink()
    files = {}
    for name in FORMATS:
        if name in comps:
            files[name] = ctx.tmp / f"{name}.{FORMATS[name]}"
    for name, p in files.items():
        p.write_bytes(file_bytes(ctx, comps, name, files))
    argv = _confined(_argv(comps, files, ctx.tmp), ctx.tmp)
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True)
    err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="backslashreplace")
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = ctx.cli.main(argv)
        except SystemExit as exc:
            rc = exc.code
    err.flush()
    stdout = out.buffer.getvalue().decode("utf-8", "replace")
    stderr = err.buffer.getvalue().decode("utf-8", "replace")
    if echo:
        print("argv:", argv, "\nexit:", rc, "\nstdout:", stdout[-2000:], "\nstderr:", stderr)
    if "Traceback (most recent call last)" in stdout + stderr:
        raise Unclean("CLI printed a traceback", stderr.strip()[-300:])
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    if rc == 2 and (len(lines) == 1 and lines[0].startswith("error: ") or _usage_error(lines)):
        raise Clean(lines[-1])
    if rc not in (0, None):
        raise Unclean(f"CLI exit {rc}, stderr not one 'error:' line", " | ".join(lines)[:300])
    if comps["argv"]["_cmd"] == "import-hf":
        return _import_figures(ctx, argv, stdout, stderr)
    if "--json" in argv:
        try:
            data = json.loads(stdout)
        except ValueError:
            raise Unclean("CLI --json output is not JSON", stdout[:200]) from None
        if comps["argv"]["_cmd"] == "validate":
            return case_figures(data["cases"], data["summary"])
        return report_figures(data)
    if comps["argv"]["_cmd"] == "validate":  # case rows echo their bad input ("-inf is out...")
        stdout = stdout.split("Summary", 1)[1] if "Summary" in stdout else ""
    return {"text output": NAN if NON_FINITE_TEXT.search(stdout) else 0.0}


def _numbers(doc: Any, prefix: str = "") -> dict[str, Any]:
    """Every number in a parsed document, by its path."""
    if isinstance(doc, dict):
        return {
            k: v for key, val in doc.items() for k, v in _numbers(val, f"{prefix}.{key}").items()
        }
    if isinstance(doc, list):
        return {
            k: v for i, val in enumerate(doc) for k, v in _numbers(val, f"{prefix}[{i}]").items()
        }
    return {prefix: doc} if isinstance(doc, int | float) and not isinstance(doc, bool) else {}


def _import_figures(ctx: Context, argv: list[str], stdout: str, stderr: str) -> dict[str, Any]:
    """The parameter counts ``import-hf`` prints and every number of the YAML it wrote."""
    summary, text = (stdout, None) if "-o" in argv else (stderr, stdout)
    if text is None:
        out = Path(argv[argv.index("-o") + 1])
        text = out.read_text() if out.is_file() else ""
    m = re.search(r"params: (\S+) B total(?:, (\S+) B active)?", summary)
    figures = {"params total": float(m[1]), "params active": float(m[2] or 0)} if m else {}
    try:
        return figures | _numbers(ctx.yaml.safe_load(text), "yaml")
    except ctx.yaml.YAMLError:
        raise Unclean("import-hf wrote YAML that does not parse", text[:200]) from None


RUNNERS = {"api": run_api, "cli": run_cli, "upload": run_upload}


def _where(exc: BaseException) -> tuple[str, str]:
    """(file:function, file:line) of the innermost frame in planner/ or app_pages/."""
    frames = traceback.extract_tb(exc.__traceback__)
    code = (REPO / "planner", REPO / "app_pages")
    ours = [f for f in frames if any(Path(f.filename).is_relative_to(d) for d in code)] or frames
    if not ours:
        return "?", "?"
    f = ours[-1]
    path = Path(f.filename)
    rel = path.relative_to(REPO) if path.is_relative_to(REPO) else Path(path.name)
    return f"{rel}:{f.name}", f"{rel}:{f.lineno}"


def _one_line(exc: BaseException) -> str:
    try:
        text = " ".join(str(exc).split())
    except Exception:  # noqa: BLE001 - a str() that fails is itself a finding
        text = "<str() failed>"
    return text[:200]


def execute(ctx: Context, inp: Input, comps: dict, mutated: set) -> tuple[str, str | None, str]:
    """(outcome, failure class or None, detail) of one input."""
    from planner.errors import PlannerError

    try:
        figures = RUNNERS[inp.path](ctx, inp.kind, comps, mutated)
    except (PlannerError, Clean) as exc:
        return "clean", None, _one_line(exc)
    except Unclean as exc:
        return "traceback", f"{exc.args[0]} [{inp.path}/{inp.kind}]", exc.args[1]
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 - every other exception is a finding
        func, line = _where(exc)
        name = type(exc).__name__
        return "traceback", f"{name} in {func}", f"{name}: {_one_line(exc)} (at {line})"
    for key, value in figures.items():
        if isinstance(value, float) and not math.isfinite(value):
            return "nonfinite", f"non-finite {key} [{inp.path}/{inp.kind}]", f"{key} = {value}"
    return "finite", None, "finite report"


def timed(ctx: Context, inp: Input, muts: list[Mut]) -> tuple[str, str | None, str, float]:
    """``execute`` with ``muts`` applied to the input's base, and its wall time."""
    if muts is inp.muts:  # as generated: already applied
        comps, mutated = inp.comps, {m.target for m in muts}
    else:
        comps, mutated = materialize(inp, muts)
    t0 = time.perf_counter()
    outcome, sig, detail = execute(ctx, inp, comps, mutated)
    return outcome, sig, detail, time.perf_counter() - t0


def shrink(ctx: Context, inp: Input, keep: Any, progress: Any = None) -> tuple[list[Mut], str]:
    """Drop mutations one at a time while ``keep(outcome, sig, elapsed)`` still holds."""
    muts, detail, i = list(inp.muts), "", 0
    while i < len(muts):
        trial = muts[:i] + muts[i + 1 :]
        if progress is not None:
            progress[1] = time.monotonic()
        outcome, sig, d, elapsed = timed(ctx, inp, trial)
        if keep(outcome, sig, elapsed):
            muts, detail = trial, d
        else:
            i += 1
    if not detail:
        detail = timed(ctx, inp, muts)[2]
    return muts, detail


# ---- the worker and its supervisor --------------------------------------------------------------
def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _worker(path: str, seed: int, span: tuple, conn: Any, progress: Any, tell: Any, root: str):
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_BYTES, ADDRESS_SPACE_BYTES))
    sys.stdout = sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - the worker's lifetime
    try:
        ctx = Context(path, root)
        os.chdir(ctx.tmp)  # files a CLI input writes (--trace 8) land here
        if tell is not None:
            inp = generate(ctx, path, seed, tell)
            conn.send(("describe", tell, inp.kind, inp.describe()))
        seen: Counter = Counter()
        for i in range(*span):
            progress[0], progress[1] = i, time.monotonic()
            try:
                inp = generate(ctx, path, seed, i)
            except Exception as exc:  # noqa: BLE001 - a harness bug: report it, go on
                conn.send(("skipped", i, "".join(traceback.format_exception(exc))[-2000:]))
                continue
            outcome, sig, detail, elapsed = timed(ctx, inp, inp.muts)
            slow_sig = f"> {SLOW_S:g} s [{path}/{inp.kind}]" if elapsed > SLOW_S else None
            repros = []
            for s, keep in (
                (sig, lambda o, g, t, want=(outcome, sig): (o, g) == want),
                (slow_sig, lambda o, g, t: t > SLOW_S),
            ):
                if s and seen[s] < REPROS_PER_CLASS and (s == sig or elapsed < 3):
                    seen[s] += 1
                    muts, d = shrink(ctx, inp, keep, progress)
                    repros.append((s, f"{inp.describe(muts)}\n    -> {d or detail}"))
            conn.send((i, inp.kind, outcome, elapsed, sig, slow_sig, repros, _rss_mb()))
        progress[1] = 0.0
        conn.send(("done", _rss_mb()))
    except BaseException as exc:  # noqa: BLE001 - a harness bug: tell the parent
        conn.send(("worker_error", "".join(traceback.format_exception(exc))[-3000:]))


@dataclass
class Tally:
    """Counts of one path (and of each of its kinds), and the failure classes."""

    counts: dict = field(default_factory=lambda: defaultdict(Counter))
    times: dict = field(default_factory=lambda: defaultdict(list))
    rss_mb: dict = field(default_factory=dict)
    wall_s: dict = field(default_factory=dict)
    classes: dict = field(default_factory=dict)  # sig -> {"outcome", "count", "repros"}
    errors: list = field(default_factory=list)
    hang_s: float = HANG_S

    def add(self, path: str, kind: str, outcome: str, elapsed: float, slow: bool) -> None:
        for key in (path, f"{path}/{kind}"):
            self.counts[key][outcome] += 1
            self.counts[key]["inputs"] += 1
            self.counts[key]["slow"] += slow
            self.times[key].append(elapsed)

    def failure(self, sig: str, outcome: str, repros: list[str]) -> None:
        entry = self.classes.setdefault(sig, {"outcome": outcome, "count": 0, "repros": []})
        entry["count"] += 1
        entry["repros"] += repros[: REPROS_PER_CLASS - len(entry["repros"])]

    def total(self, outcome: str) -> int:
        return sum(c[outcome] for k, c in self.counts.items() if "/" not in k)


def _record(tally: Tally, path: str, kind: str, failed: tuple, text: str | None) -> None:
    _index, sig, outcome = failed
    tally.add(path, kind, outcome, tally.hang_s if outcome == "hang" else 0.0, outcome == "hang")
    tally.failure(sig, outcome, [text] if text else [])


def _run_path(tally: Tally, path: str, seed: int, n: int, log: Any, root: str) -> None:
    """Inputs 0..n-1 of ``path`` in watched child processes (a new one after a hang or crash)."""
    mpc = mp.get_context("fork")
    progress = mpc.RawArray("d", 2)  # index and start time (monotonic) of the running input
    start, t0, rss = 0, time.perf_counter(), 0.0
    failed: tuple | None = None  # (index, class, outcome) of the input that hung or crashed
    while start < n or failed:
        recv, send = mpc.Pipe(duplex=False)
        progress[0], progress[1] = start, 0.0
        tell = failed[0] if failed else None
        args = (path, seed, (start, n), send, progress, tell, root)
        proc = mpc.Process(target=_worker, args=args, daemon=True)
        proc.start()
        send.close()
        done, hung, next_i = False, False, start
        while not done:
            if not recv.poll(0.2):
                if not proc.is_alive():
                    break
                if progress[1] and time.monotonic() - progress[1] > tally.hang_s:
                    proc.kill()
                    hung = True
                    break
                continue
            try:
                msg = recv.recv()
            except EOFError:
                break
            if msg[0] == "done":
                done, rss = True, max(rss, msg[1])
            elif msg[0] == "describe":
                _record(tally, path, msg[2], failed, msg[3])
                failed = None
            elif msg[0] == "skipped":
                next_i = msg[1] + 1
                if len(tally.errors) < 5:
                    tally.errors.append(f"[{path}] input {msg[1]} not generated: {msg[2]}")
            elif msg[0] == "worker_error":
                tally.errors.append(f"[{path}] {msg[1]}")
                done, n = True, 0
            else:
                i, kind, outcome, elapsed, sig, slow_sig, repros, r = msg
                rss, next_i = max(rss, r), i + 1
                tally.add(path, kind, outcome, elapsed, slow_sig is not None)
                for s, o in ((sig, outcome), (slow_sig, "slow")):
                    if s:
                        tally.failure(s, o, [text for g, text in repros if g == s])
                if log and next_i % 5000 == 0:
                    log(f"  {path}: {next_i:,} / {n:,} ({time.perf_counter() - t0:.0f} s)")
        proc.join()
        if failed:  # the worker died before describing the previous failure
            _record(tally, path, "?", failed, None)
            failed = None
        if done:
            break
        if not hung and not progress[1]:  # died before its first input: give up on this path
            tally.errors.append(f"[{path}] worker died at start (exit {proc.exitcode})")
            break
        sig = f"hang, killed after {tally.hang_s:g} s [{path}]" if hung else None
        sig = sig or f"worker died (exit {proc.exitcode}) [{path}]"
        failed = (next_i, sig, "hang" if hung else "traceback")
        start = next_i + 1
    tally.rss_mb[path] = rss
    tally.wall_s[path] = time.perf_counter() - t0


def run_fuzz(
    n: int = 100_000,
    seed: int = 0,
    paths: tuple = ("api", "cli", "upload"),
    log: Any = None,
    hang_s: float = HANG_S,
) -> Tally:
    """Run ``n`` inputs split over ``paths`` by MIX; return the tally."""
    weights = {p: MIX[p] for p in paths}
    total_w = sum(weights.values())
    sizes = {p: round(n * w / total_w) for p, w in weights.items()}
    tally = Tally(hang_s=hang_s)
    root = tempfile.mkdtemp(prefix="planner-fuzz-")
    try:
        for path, size in sizes.items():
            if size:
                _run_path(tally, path, seed, size, log, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return tally


# ---- printing -----------------------------------------------------------------------------------
def _ms(times: list[float], q: float) -> str:
    """The q-quantile of ``times`` in milliseconds."""
    if not times:
        return "-"
    ordered = sorted(times)
    return f"{ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1e3:,.2f}"


def print_report(tally: Tally, n: int, seed: int, repros: int = REPROS_PER_CLASS) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console(width=200 if not sys.stdout.isatty() else None)
    table = Table(title=f"Fuzz benchmark: {n:,} inputs, seed {seed}")
    cols = ("path / kind", "inputs", "clean errors", "finite reports", "tracebacks", "non-finite")
    cols += ("hangs", "> 1 s", "p50 ms", "p99 ms", "max ms", "peak RSS MB", "wall s")
    for col in cols:
        table.add_column(col, justify="left" if col == "path / kind" else "right")
    keys = [k for p in MIX for k in sorted(tally.counts) if k == p or k.startswith(p + "/")]
    for key in keys:
        c, path = tally.counts[key], key.split("/")[0]
        is_path = "/" not in key
        row = [key if is_path else f"  {key.split('/', 1)[1]}", f"{c['inputs']:,}"]
        row += [f"{c[o]:,}" for o in ("clean", "finite", "traceback", "nonfinite", "hang")]
        row += [f"{c['slow']:,}", _ms(tally.times[key], 0.5), _ms(tally.times[key], 0.99)]
        row += [_ms(tally.times[key], 1.0)]
        if is_path:
            row += [f"{tally.rss_mb.get(path, 0):,.0f}", f"{tally.wall_s.get(path, 0):,.0f}"]
        else:
            row += ["", ""]
        table.add_row(*row, style="bold" if is_path else None)
    console.print(table)
    peak = max(tally.rss_mb.values(), default=0.0)
    totals = {o: tally.total(o) for o in ("traceback", "nonfinite", "hang", "slow")}
    console.print(
        f"Totals: {tally.total('inputs'):,} inputs, {tally.total('clean'):,} clean errors, "
        f"{tally.total('finite'):,} finite reports, {totals['traceback']:,} tracebacks, "
        f"{totals['nonfinite']:,} non-finite, {totals['hang']:,} hangs, {totals['slow']:,} over "
        f"1 s, peak RSS {peak:,.0f} MB. Targets (0 tracebacks, 0 non-finite, 0 over 1 s, peak "
        f"under 500 MB): {'met' if not any(totals.values()) and peak < 500 else 'not met'}."
    )
    for err in tally.errors:
        console.print(f"[red]harness error[/red]\n{err}", markup=True, highlight=False)
    if not tally.classes:
        return
    ct = Table(title="Failure classes")
    for col in ("class", "outcome", "inputs"):
        ct.add_column(col, justify="right" if col == "inputs" else "left")
    ordered = sorted(tally.classes.items(), key=lambda kv: -kv[1]["count"])
    for sig, e in ordered:
        ct.add_row(escape(sig), e["outcome"], f"{e['count']:,}")
    console.print(ct)
    console.print(failure_text(dict(ordered), repros), markup=False, highlight=False)


def failure_text(classes: dict, repros: int = REPROS_PER_CLASS) -> str:
    """Each failure class, most frequent first, with its first minimal repros."""
    out = []
    for sig, e in sorted(classes.items(), key=lambda kv: -kv[1]["count"]):
        out.append(f"\n{sig} ({e['count']:,} inputs)")
        out += e["repros"][:repros] or ["    (no repro recorded)"]
    return "\n".join(out)


def repro(spec: str, seed: int) -> None:
    """Run one input in this process and show its full traceback or output."""
    path, index = spec.split(":")
    ctx = Context(path)
    os.chdir(ctx.tmp)
    inp = generate(ctx, path, seed, int(index))
    print(inp.describe())
    runner = RUNNERS[path]
    mutated = {m.target for m in inp.muts}
    kwargs = {"echo": True} if path == "cli" else {}
    t0 = time.perf_counter()
    try:
        figures = runner(ctx, inp.kind, inp.comps, mutated, **kwargs)
        print(
            {k: v for k, v in figures.items() if isinstance(v, float) and not math.isfinite(v)}
            or "all figures finite"
        )
    except Exception:  # noqa: BLE001 - show it
        traceback.print_exc()
    print(f"{time.perf_counter() - t0:.3f} s")
    shutil.rmtree(ctx.tmp, ignore_errors=True)


def _progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--n", type=int, default=100_000, help="inputs in all (default 100,000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--paths", default="api,cli,upload", help="comma-separated: api,cli,upload")
    parser.add_argument(
        "--hang-s", type=float, default=HANG_S, help="kill an input after this long (default 10)"
    )
    parser.add_argument("--repros", type=int, default=REPROS_PER_CLASS, help="repros per class")
    parser.add_argument("--repro", metavar="PATH:INDEX", help="run one input with its traceback")
    args = parser.parse_args(argv)
    if args.repro:
        repro(args.repro, args.seed)
        return 0
    paths = tuple(p for p in args.paths.split(",") if p)
    unknown = [p for p in paths if p not in MIX]
    if unknown:
        parser.error(f"unknown path {unknown[0]} (valid: api, cli, upload)")
    tally = run_fuzz(args.n, args.seed, paths, log=_progress, hang_s=args.hang_s)
    print_report(tally, args.n, args.seed, args.repros)
    return 0


if __name__ == "__main__":
    sys.exit(main())
