"""The tuning commands' figures: R(K) of profiles (Figure 8) and the selection's TPS against budget."""
from __future__ import annotations

from pathlib import Path

import attrs
import numpy as np

from .select import Pair, pooled
from .stats import r_of_k


def plot_r_of_k(profiles: dict[str, dict], path: Path) -> None:
    """Figure 8: per-token verification saving R(K) against width, one bar series per profile."""
    from as2d_bench.report import saved_figure

    with saved_figure(path, (7, 3.5)) as ax:
        n = len(profiles)
        for i, (name, profile) in enumerate(profiles.items()):
            r = profile.get("r_k_pct") or r_of_k(profile["verify_s"]["alone"])
            ks = sorted(int(k) for k in r if int(k) > 1)
            x = np.array(ks) + (i - (n - 1) / 2) * (0.8 / n)
            ax.bar(x, [r[str(k)]["r_pct"] for k in ks], width=0.8 / n, yerr=[r[str(k)]["err_pct"] for k in ks],
                   capsize=2, label=name)
        ax.set_xlabel("physical verification width K")
        ax.set_ylabel("R(K), saving per position (%)")
        ax.set_title("Per-token verification saving relative to K=1 (eq. 2)")
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=8)


def plot_budgets(grid: dict[Pair, dict[str, tuple[int, float]]], selected: Pair, path: Path,
                 target_only_tps: float | None = None, clock: str = "e2e") -> None:
    """Pooled development TPS against budget, one line per source, niceness and start; the selected choice marked."""
    from as2d_bench.report import saved_figure

    def label(p: Pair) -> str:
        return " ".join(x for x in (p.source, None if p.niceness is None else f"nice {p.niceness}", p.start) if x)

    with saved_figure(path, (7, 3.5)) as ax:
        for series in sorted({attrs.evolve(p, budget=0) for p in grid}, key=Pair.key):
            pairs = sorted((p for p in grid if attrs.evolve(p, budget=0) == series), key=lambda p: p.budget)
            ax.plot([p.budget for p in pairs], [pooled(grid[p]) for p in pairs], marker="o", ms=3, label=label(series))
        ax.plot([selected.budget], [pooled(grid[selected])], marker="*", ms=14, color="black", ls="none",
                label=f"selected: {label(selected)} b={selected.budget}")
        if target_only_tps:
            ax.axhline(target_only_tps, color="gray", ls="--", lw=1, label="target-only")
        ax.set_xlabel("proposal budget b (physical width <= b+1)")
        ax.set_ylabel(f"pooled TPS (replay, dev, {'arrival to last token' if clock == 'e2e' else 'decode clock'})")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
