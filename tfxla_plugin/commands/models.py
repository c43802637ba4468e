"""``tfxla models``: list and build the sample SavedModels of ``saved_models/``.

    tfxla models list
    tfxla models build [NAME ...] [--style saved_model|export|both] [--out DIR] [--rebuild] [--option K=V ...]

``build`` prints one built directory per line (cached models are reused; see ``saved_models``).
``python -m saved_models`` is the same command without the ``tfxla models build`` prefix.
The ``saved_models`` package lives at the repository root: run from a checkout.
"""

from __future__ import annotations

import argparse
import sys

STYLE_CHOICES = ("saved_model", "export", "both")


def _saved_models():
    try:
        import saved_models
    except ImportError:
        raise SystemExit("tfxla models: the saved_models package is not importable; run from the repository "
                         "root of a tfxla-plugin checkout") from None
    return saved_models


def parse_options(items: list[str]) -> dict[str, str]:
    options = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--option {item!r}: expected KEY=VALUE, e.g. input_shape=96x96x3")
        options[key.strip()] = value.strip()
    return options


def build_models(names: list[str], style: str, out: str | None, rebuild: bool, options: dict) -> list:
    """Build each of ``names`` (all when empty) in ``style`` (or both); returns the directories."""
    sm = _saved_models()
    check_request(names, options)
    styles = sm.STYLES if style == "both" else (style,)
    paths = []
    for name in names or sm.MODELS:
        recipe = sm.recipe(name)
        # an option applies to the models that have it (e.g. input_shape for small_cnn and mobilenet_v2)
        own = {k: v for k, v in options.items() if k in recipe.options}
        for s in styles:
            paths.append(sm.build(name, s, cache_dir=out, rebuild=rebuild, **own))
    return paths


def list_text() -> str:
    sm = _saved_models()
    lines = [f"cache: {sm.default_cache_dir()}"]
    for name in sm.MODELS:
        r = sm.recipe(name)
        lines.append(f"{name}: {r.description}")
        for key, option in r.options.items():
            default = "x".join(map(str, option.default)) if isinstance(option.default, tuple) else option.default
            lines.append(f"    --option {key}=... (default {default}): {option.help}")
    return "\n".join(lines)


def run_build(args: argparse.Namespace) -> int:
    try:
        options = parse_options(args.option or [])
        for path in build_models(args.names, args.style, args.out, args.rebuild, options):
            print(path)
    except ValueError as e:
        print(f"tfxla models build: {e}", file=sys.stderr)
        return 1
    return 0


def check_request(names: list[str], options: dict) -> None:
    """Unknown names and options fail before anything is built."""
    sm = _saved_models()
    for name in names or sm.MODELS:
        if name not in sm.MODELS:
            raise ValueError(f"unknown model {name!r}; models: {', '.join(sm.MODELS)}")
    chosen = names or sm.MODELS
    stray = sorted(k for k in options if not any(k in sm.recipe(n).options for n in chosen))
    if stray:
        raise ValueError(f"option(s) {', '.join(stray)} apply to none of {', '.join(chosen)}")
    for name in chosen:
        recipe = sm.recipe(name)
        recipe.resolve({k: v for k, v in options.items() if k in recipe.options})


def run_list(args: argparse.Namespace) -> int:
    print(list_text())
    return 0


def add_build_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("names", nargs="*", metavar="NAME", help="models to build (default: all)")
    p.add_argument("--style", choices=STYLE_CHOICES, default="both",
                   help="saved_model: tf.saved_model.save; export: model.export (Keras 3); both (default)")
    p.add_argument("--out", default=None, help="cache directory (default $XDG_CACHE_HOME/tfxla_plugin/saved_models)")
    p.add_argument("--rebuild", action="store_true", help="rebuild even when the cached model is current")
    p.add_argument("--option", action="append", metavar="KEY=VALUE",
                   help="a recipe option, e.g. input_shape=96x96x3 or seed=1 (repeatable; see `tfxla models list`)")


def register(sub) -> None:
    p = sub.add_parser("models", help="list and build the sample SavedModels (saved_models/)")
    actions = p.add_subparsers(dest="models_command", metavar="ACTION")
    lst = actions.add_parser("list", help="the sample models and their options")
    lst.set_defaults(func=run_list)
    build = actions.add_parser("build", help="build sample SavedModels into the cache (prints their directories)")
    add_build_arguments(build)
    build.set_defaults(func=run_build)
    p.set_defaults(func=lambda args: (p.print_help(), 0)[1])
