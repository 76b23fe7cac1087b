"""An Optuna study's search space in memreplay's spelling (the space JSON of
`memreplay trials --space` and `memreplay par --space`; docs/trials.md), read
through Optuna itself from the study's storage: the union of the
distributions its trials were sampled from, the parameters that decide
memory picked out by their usual names, the rest ignored.

    python3 -m memreplay.space --storage sqlite:///study.db --study bert [--fixed seq_len=128] > space.json

is what `memreplay par --optuna-storage URL --study NAME` runs (docs/optuna.md).
"""

import argparse
import json
import sys

__all__ = ["space_from_study", "NAMES"]

# memreplay's key -> the parameter names Optuna users give it (Hugging Face
# TrainingArguments' among them).
NAMES = {
    "model": ("model", "model_name", "model_name_or_path", "model_id", "base_model", "checkpoint"),
    "batch": ("batch", "batch_size", "per_device_train_batch_size", "train_batch_size", "bs"),
    "seq_len": ("seq_len", "seq_length", "max_length", "max_seq_length", "max_seq_len", "sequence_length"),
    "grad_accum": ("grad_accum", "gradient_accumulation_steps", "accumulation_steps"),
    "precision": ("precision", "mixed_precision", "dtype"),
    "optimizer": ("optimizer", "optim"),
    "gradient_checkpointing": ("gradient_checkpointing", "checkpointing"),
    "attention": ("attention", "attn_implementation"),
}
_CHOICE_KEY = {"batch": "batch_sizes", "seq_len": "seq_lens", "grad_accum": "grad_accum", "precision": "precisions",
               "optimizer": "optimizers", "gradient_checkpointing": "checkpointing", "attention": "attention"}
_MAX_VALUES = 256


def _values(dist, name):
    """The values a distribution can give, for a memory parameter."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    if isinstance(dist, CategoricalDistribution):
        return list(dist.choices)
    if isinstance(dist, IntDistribution):
        vals = list(range(dist.low, dist.high + 1, dist.step or 1))
        if len(vals) > _MAX_VALUES:
            raise ValueError(f"parameter {name!r}: {len(vals)} values from {dist.low} to {dist.high}; "
                             f"memreplay enumerates a space's values (at most {_MAX_VALUES}): use a step or categorical choices")
        return vals
    if isinstance(dist, FloatDistribution):
        raise ValueError(f"parameter {name!r} is a float ({dist}); a memory parameter is a count or a choice")
    raise ValueError(f"parameter {name!r}: distribution {dist!r} is not one memreplay reads")


def _precision(key, v):
    if key in ("fp16", "bf16"):  # TrainingArguments' booleans
        return key if v else "fp32"
    return str(v).lower()


def space_from_study(study, fixed=None, names=None):
    """(space dict, notes). fixed: memreplay key -> value for what the study
    does not search (e.g. {"seq_len": 128}); names: memreplay key -> the
    study's parameter name, where it is not one of NAMES."""
    fixed = dict(fixed or {})
    lookup = {k: list(v) for k, v in NAMES.items()}
    for k, v in (names or {}).items():
        if k not in lookup:
            raise ValueError(f"unknown memreplay key {k!r} (known: {', '.join(sorted(lookup))})")
        lookup[k] = [v]
    dists, trials = {}, study.get_trials(deepcopy=False)
    for t in trials:
        for n, d in t.distributions.items():
            dists.setdefault(n, {})[repr(d)] = d
    values, notes, used = {}, [], set()
    for key, cands in lookup.items():
        for n in cands:
            if n in dists:
                vals = []
                for d in dists[n].values():
                    vals += [v for v in _values(d, n) if v not in vals]
                values[key] = vals
                used.add(n)
                break
    for flag in ("fp16", "bf16"):
        if "precision" not in values and flag in dists:
            vals = []
            for d in dists[flag].values():
                vals += [_precision(flag, v) for v in _values(d, flag)]
            values["precision"] = sorted(set(vals))
            used.add(flag)
    for k, v in fixed.items():
        if k not in lookup:
            raise ValueError(f"--fixed {k}: unknown memreplay key (known: {', '.join(sorted(lookup))})")
        if k in values:
            raise ValueError(f"--fixed {k}: the study searches it already (as {sorted(used)})")
        values[k] = [v]
    ignored = sorted(set(dists) - used)
    if ignored:
        notes.append("parameters that do not decide memory, ignored: " + ", ".join(ignored))
    notes.append(f"{len(trials)} trials read from study {study.study_name!r}")
    for k in ("model", "batch", "seq_len"):
        if k not in values:
            raise ValueError(f"the study has no parameter for {k} (names tried: {', '.join(lookup[k])}): "
                             f"pass --fixed {k}=VALUE, or --name {k}=PARAM")
    space = {"name": f"optuna:{study.study_name}", "models": [str(m) for m in values.pop("model")], "choices": {}}
    for k, vals in values.items():
        ck = _CHOICE_KEY[k]
        if k in ("batch", "seq_len", "grad_accum"):
            vals = [int(v) for v in vals]
        elif k == "gradient_checkpointing":
            vals = [bool(v) for v in vals]
        elif k == "precision":
            vals = [_precision(k, v) for v in vals]
        else:
            vals = [str(v) for v in vals]
        space["choices"][ck] = vals
    return space, notes


def _pairs(items, what):
    out = {}
    for it in items or []:
        k, sep, v = it.partition("=")
        if not sep or not k:
            raise ValueError(f"{what} {it!r}: want KEY=VALUE")
        out[k] = int(v) if v.isdigit() else v
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m memreplay.space", description=__doc__.split("\n\n")[0])
    ap.add_argument("--storage", required=True, help="the study's storage URL (sqlite:///..., postgresql://...)")
    ap.add_argument("--study", required=True, help="the study's name")
    ap.add_argument("--fixed", action="append", help="KEY=VALUE for what the study does not search (model, seq_len, ...)")
    ap.add_argument("--name", action="append", help="KEY=PARAM: the study's name for a memreplay key")
    a = ap.parse_args(argv)
    try:
        import optuna
    except ImportError:
        print("memreplay.space: optuna is not installed for " + sys.executable, file=sys.stderr)
        return 2
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        study = optuna.load_study(study_name=a.study, storage=a.storage)
        space, notes = space_from_study(study, _pairs(a.fixed, "--fixed"), _pairs(a.name, "--name"))
    except (KeyError, ValueError) as e:
        print(f"memreplay.space: {a.storage}, study {a.study!r}: {e}", file=sys.stderr)
        return 2
    for n in notes:
        print("memreplay.space: " + n, file=sys.stderr)
    json.dump(space, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
