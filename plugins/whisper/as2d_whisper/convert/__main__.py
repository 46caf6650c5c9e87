"""``python -m as2d_whisper.convert NAME... [--out DIR] [--mnn]``: convert installed folders by hand."""
from __future__ import annotations

from pathlib import Path

from .mnn import convert_mnn
from .onnx_export import convert_onnx
from .weights import MODELS


def main(argv: list[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m as2d_whisper.convert",
                                     description="Convert the packaged Whisper models into "
                                     "installed folders (ONNX, or --mnn to add MNN graphs).")
    parser.add_argument("names", nargs="+", choices=MODELS)
    parser.add_argument("--out", default=None, help="models folder (default: $AS2D_MODELS_DIR or ~/.local/share/as2d/models)")
    parser.add_argument("--mnn", action="store_true",
                        help="only add the MNN graphs to already converted (ONNX) folders (needs MNN, not torch)")
    args = parser.parse_args(argv)
    from as2d_core.setup.paths import models_dir as default_models_dir

    root = Path(args.out) if args.out else default_models_dir()
    for name in args.names:
        if args.mnn:
            convert_mnn(root / name)
        else:
            convert_onnx(name, root / name)


if __name__ == "__main__":
    main()
