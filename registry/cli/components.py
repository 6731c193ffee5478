"""``ladd list-components`` and ``ladd show``: the registered components and one component's options."""
from __future__ import annotations

import argparse
import json

from registry.host.kinds import KIND_SPECS, KINDS
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
    if component.spec.description:
        print(f"  {component.spec.description}")
    factory = component.spec.factory
    print(f"  factory: {factory if isinstance(factory, str) else f'{factory.__module__}:{factory.__qualname__}'}")
    print(f"  implements: registry.interfaces.{KIND_SPECS[component.kind].interface}")
    print(format_options(component))
