"""``ladd list-components`` and ``ladd show``: the registered components and one component's options."""
from __future__ import annotations

import argparse
import json

from registry.errors import LaddError
from registry.host.component import Component
from registry.host.kinds import KIND_SPECS, KINDS, SLOTS
from registry.host.options import format_options
from registry.host.registry import Registry

from .notices import print_problems


def register(sub: argparse._SubParsersAction) -> None:
    """Add both commands to the parser."""
    p = sub.add_parser("list-components", help="list registered components with their origin")
    p.add_argument("--kind", choices=KINDS)
    p.add_argument("--json", action="store_true", help="print a JSON list of objects")
    p.set_defaults(run=list_components)
    p = sub.add_parser(
        "show", help="one component: origin, description and every option with its type, default and help"
    )
    p.add_argument("kind", choices=KINDS)
    p.add_argument("name")
    p.add_argument(
        "--parameters",
        nargs="*",
        metavar="KEY=VALUE",
        help="list the parameters (name, shape, dtype) a backbone, encoder or latent holds in a model, as its weights "
        "and an importer's fill() name them: built on the meta device from the default experiment with these overrides",
    )
    p.set_defaults(run=show)


def list_components(args: argparse.Namespace, registry: Registry) -> None:
    """A table (or JSON) of every registered component: kind, name, origin and description."""
    rows = [c.as_dict() for c in registry if args.kind in (None, c.kind)]
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        columns = ("kind", "name", "plugin", "distribution", "version")
        widths = {key: max([len(key)] + [len(str(r[key] or "-")) for r in rows]) for key in columns}
        print("  ".join(f"{k:<{widths[k]}}" for k in columns) + "  description")
        for r in rows:
            print("  ".join(f"{str(r[k] or '-'):<{widths[k]}}" for k in columns) + f"  {r['description']}")
    print_problems(registry)


def show(args: argparse.Namespace, registry: Registry) -> None:
    """One component: its origin, description, factory, interface and options."""
    component = registry.get(args.kind, args.name)
    print(component.label)
    print(f"  qualified name: {component.qualified}")
    if component.spec.description:
        print(f"  {component.spec.description}")
    factory = component.spec.factory
    print(f"  factory: {factory if isinstance(factory, str) else f'{factory.__module__}:{factory.__qualname__}'}")
    print(f"  implements: registry.interfaces.{KIND_SPECS[component.kind].interface}")
    if args.parameters is not None:
        print(parameter_table(component, args.parameters, registry))
        return
    print(format_options(component))


def parameter_table(component: Component, overrides: list[str], registry: Registry) -> str:
    """The parameters ``component`` holds in the model of the default experiment with ``overrides`` (and the component
    in its kind's first slot that holds a network), as an importer fills them: name, shape, dtype."""
    import torch  # and Hydra: only when parameters are asked for
    from torch import nn

    from registry.config.composition import compose
    from registry.engine.assembly import build_experiment

    if not issubclass(KIND_SPECS[component.kind].interface_class(), nn.Module):
        raise LaddError(
            f"{component.label} is no network and holds no parameters; --parameters lists a backbone's, an encoder's "
            "or a latent's"
        )
    slot = next(slot.name for slot in SLOTS.values() if slot.kind == component.kind)
    settings = compose([*overrides, f"{slot}={component.qualified}"], registry)
    with torch.device("meta"):  # shapes without values: a large network costs no memory
        module = getattr(build_experiment(settings, registry).model, slot)
    rows = [(f"{slot}.{name}", "x".join(map(str, p.shape)) or "scalar", str(p.dtype).removeprefix("torch."))
            for name, p in module.named_parameters()]
    header = ("parameter", "shape", "dtype")
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(2)]
    values = sum(p.numel() for p in module.parameters())
    lines = [f"parameters ({len(rows)}, {values:,} values) of {slot} in the model folder's weights:"]
    lines += [f"  {a:<{widths[0]}}  {b:<{widths[1]}}  {c}" for a, b, c in [header, *rows]]
    return "\n".join(lines)
