"""Study plots render headless to PNG and draw what the table holds."""

from __future__ import annotations

import pandas as pd
import pytest

from tests.conftest import TINY
from zionsim.io import plots_study as ps
from zionsim.io.plots import save

PNG = b"\x89PNG"


@pytest.fixture(scope="module")
def table() -> pd.DataFrame:
    """A sweep-like table: 2 topologies × 3 sizes, plus one failed point."""
    rows = []
    for topo, speed in (("zion", 0.6), ("zionex", 0.9)):
        for gpus in (8, 16, 32):
            rows.append(
                {
                    "point_id": f"{topo}{gpus:02d}",
                    "topology": topo,
                    "gpus": gpus,
                    "samples_per_s": 1e4 * gpus * speed ** (gpus // 8 - 1),
                    "breakdown_s.gemm": 0.004,
                    "breakdown_s.all_to_all": 0.002 / speed,
                    "breakdown_s.idle": 0.0,
                    "status": "ok",
                }
            )
    rows.append({"point_id": "zz", "topology": "zion", "gpus": 64, "status": "error"})
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def run():
    """A tiny real run (2 nodes × 2 GPUs): its links and events tables."""
    from zionsim.sim.run import run_point

    return run_point({"topology": TINY, "workload": "tiny", "iterations": 2})


def _png(ax, tmp_path) -> bytes:
    path = tmp_path / "p.png"
    save(ax, path)
    return path.read_bytes()


def test_scaling_one_line_per_group(table, tmp_path):
    """One line per topology, failed points left out; renders to PNG."""
    ax = ps.plot_scaling(table, by="topology")
    assert [len(line.get_xdata()) for line in ax.get_lines()] == [3, 3]
    assert ax.get_xscale() == "log"
    assert _png(ax, tmp_path).startswith(PNG)


def test_scaling_efficiency_is_relative_to_the_smallest_point(table, tmp_path):
    """Efficiency is 1 at 8 GPUs and speed^(k) after; the plot renders."""
    eff = ps.scaling_efficiency(table, by="topology")
    ok = table[table["status"] == "ok"]
    assert eff[ok["gpus"] == 8].tolist() == [1.0, 1.0]
    assert eff[(ok["topology"] == "zion") & (ok["gpus"] == 16)].iloc[0] == pytest.approx(0.6)
    assert _png(ps.plot_scaling_efficiency(table, by="topology"), tmp_path).startswith(PNG)


def test_breakdown_stacks_nonzero_categories(table, tmp_path):
    """One bar per ok row and non-zero category; tops equal the iteration time in ms."""
    ax = ps.plot_breakdown(table, label="point_id")
    bars = ax.patches
    assert len(bars) == 6 * 2  # idle is zero everywhere and not drawn
    top = max(b.get_y() + b.get_height() for b in bars)
    assert top == pytest.approx((0.004 + 0.002 / 0.6) * 1e3)
    assert _png(ax, tmp_path).startswith(PNG)


def test_compare_pairs_two_tables_or_splits_one(table, tmp_path):
    """Zion vs ZionEX from two frames or from one split by topology; the speed-up is annotated."""
    ok = table[table["status"] == "ok"]
    a, b = ok[ok["topology"] == "zion"], ok[ok["topology"] == "zionex"]
    ax = ps.plot_compare(a, b, label="gpus")
    assert len(ax.patches) == 3 * 2 * 2
    expected = (0.004 + 0.002 / 0.6) / (0.004 + 0.002 / 0.9)
    assert ax.texts[0].get_text() == f"x{expected:.2f}"
    split = ps.plot_compare(table, label="gpus")
    assert "zion (left) vs zionex" in split.get_title()
    assert _png(split, tmp_path).startswith(PNG)
    with pytest.raises(ValueError, match="rows"):
        ps.plot_compare(a, b.iloc[:2])


def test_link_utilisation_bar_per_kind(run, tmp_path):
    """One bar per link kind, heights are mean utilisation in %."""
    ax = ps.plot_link_utilisation(run.links)
    kinds = sorted(run.links["kind"].unique())
    assert [t.get_text() for t in ax.get_xticklabels()] == kinds
    heights = [p.get_height() for p in ax.patches]
    assert max(heights) <= 100
    means = run.links.groupby("kind")["utilisation"].mean() * 100
    assert heights == pytest.approx(means.tolist())
    assert _png(ax, tmp_path).startswith(PNG)


def test_timeline_rows_per_rank_and_stream(run, tmp_path):
    """Rows are (rank, stream) of the first ranks, network rows excluded; renders."""
    ax = ps.plot_timeline(run.events, max_ranks=2)
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels[0] == "rank 0 compute" and all(lab.split()[1] in "01" for lab in labels)
    assert not any("network" in lab for lab in labels)
    assert ax.get_title() == f"iteration {run.events['iteration'].max()}"
    assert _png(ax, tmp_path).startswith(PNG)


def test_sweep_plots_choose_what_applies(table):
    """Scaling, efficiency, breakdown and compare for a 2-topology x 3-size table."""
    axes = ps.sweep_plots(table, ["topology", "gpus"])
    assert set(axes) == {"breakdown", "scaling", "scaling_efficiency", "compare"}
    assert len(axes["scaling"].get_lines()) == 2
    only_one = ps.sweep_plots(table[table["topology"] == "zion"], ["gpus"])
    assert set(only_one) == {"breakdown", "scaling", "scaling_efficiency"}


def test_cli_plot_sweep_and_run_dirs(tmp_path, capsys):
    """`zionsim plot DIR`: a sweep folder gets scaling/breakdown PNGs, a run folder its own."""
    from zionsim.cli.main import main
    from zionsim.studies.sweep import run_sweep, sweep_from_dict

    sweep = {
        "base": {"topology": TINY, "workload": "tiny", "iterations": 2},
        "grid": {"nodes": [1, 2]},
    }
    run_sweep(sweep_from_dict(sweep), tmp_path / "sw", workers=1, progress=False)
    assert main(["plot", str(tmp_path / "sw")]) == 0
    names = sorted(p.name for p in (tmp_path / "sw" / "plots").glob("*.png"))
    assert names == ["breakdown.png", "scaling.png", "scaling_efficiency.png"]
    assert (
        main(
            [
                "run",
                "--topology",
                TINY,
                "--workload",
                "tiny",
                "--iterations",
                "2",
                "--out",
                str(tmp_path / "run"),
                "--no-plot",
            ]
        )
        == 0
    )
    assert main(["plot", str(tmp_path / "run")]) == 0
    names = sorted(p.name for p in (tmp_path / "run" / "plots").glob("*.png"))
    assert names == ["breakdown.png", "links.png", "timeline.png"]
    assert all(p.read_bytes().startswith(PNG) for p in (tmp_path / "run" / "plots").iterdir())
    capsys.readouterr()
    assert main(["plot", str(tmp_path)]) == 2
    assert "results.parquet" in capsys.readouterr().err


# ---- the data behind the plots: order, labels with units, scales, styles, baselines


def test_axis_values_parse_units_and_name_them():
    nic = pd.Series(["100Gbps", "200Gbps", "1Tbps"])
    values, label = ps.axis_values(nic, "topology.scale_out.nic_bw")
    assert values.tolist() == pytest.approx([100, 200, 1000]) and label == "NIC bandwidth (Gbps)"
    values, label = ps.axis_values(pd.Series([0.01, 0.02]), "iteration_time_s")
    assert values.tolist() == pytest.approx([10, 20]) and label == "iteration time (ms)"
    assert ps.axis_values(pd.Series([8, 16]), "gpus")[1] == "GPUs"
    assert ps.axis_values(pd.Series([1.0]), "samples_per_s")[1] == "throughput (samples/s)"
    assert ps.axis_values(pd.Series([0.5]), "foreground_slowdown")[0].tolist() == [50.0]
    values, label = ps.axis_values(pd.Series(["zion", "zionex"]), "topology")
    assert values.tolist() == ["zion", "zionex"] and label == "topology"


def _nic_table():
    rows = []
    for batch in (2048, 512):  # grid order: batch first, then NIC speed
        for nic, t in (("800Gbps", 0.001), ("100Gbps", 0.004), ("200Gbps", 0.002)):
            rows.append(
                {"point_id": f"{batch}{nic}", "batch_per_gpu": batch, "gpus": 16,
                 "topology.scale_out.nic_bw": nic, "samples_per_s": 16 * batch / t,
                 "iteration_time_s": t, "breakdown_s.gemm": t, "status": "ok"}
            )  # fmt: skip
    return pd.DataFrame(rows)


def test_scaling_against_unit_strings_in_grid_order():
    """Unit strings on x become numbers (sorted along each line); lines keep the grid order."""
    ax = ps.plot_scaling(_nic_table(), x="topology.scale_out.nic_bw", by="batch_per_gpu")
    assert ax.get_xlabel() == "NIC bandwidth (Gbps)"
    assert ax.get_ylabel() == "throughput (samples/s)"
    assert [list(line.get_xdata()) for line in ax.get_lines()] == [[100, 200, 800]] * 2
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["batch_per_gpu=2048", "batch_per_gpu=512"]


def test_lines_differ_without_colour():
    df = pd.DataFrame({"gpus": [8, 16] * 8, "samples_per_s": range(1, 17),
                       "w": [f"w{i // 2}" for i in range(16)]})  # fmt: skip
    lines = ps.plot_scaling(df, by="w").get_lines()
    styles = [(line.get_marker(), line.get_linestyle()) for line in lines]
    assert len(lines) == 8 and len(set(styles)) == 8


def test_log_axes_across_two_decades():
    """Throughput over four decades: log y, so the smallest series is not flat at zero."""
    df = pd.DataFrame({"gpus": [8, 1024, 8, 1024], "samples_per_s": [4.7e3, 6.8e6, 1e6, 4e7],
                       "workload": ["a", "a", "f", "f"]})  # fmt: skip
    ax = ps.plot_scaling(df, by="workload")
    assert (ax.get_xscale(), ax.get_yscale()) == ("log", "log")
    narrow = ps.plot_scaling(df.assign(samples_per_s=[1e6, 2e6, 1.5e6, 3e6]), by="workload")
    assert narrow.get_yscale() == "linear"
    with_zeros = ps.plot_scaling(
        df.assign(slowdown=[0.0, 0.0, 0.003, 6.5]), y="slowdown", by="workload"
    )
    assert with_zeros.get_yscale() == "symlog" and with_zeros.get_ylim()[0] < 0


def test_speedup_bars_have_a_baseline_at_one():
    df = pd.DataFrame({"knob": ["HBM", "NIC"], "speedup": [5.6, 1.02]})
    ax = ps.plot_bars(df, x="knob", y="speedup")
    assert [list(line.get_ydata()) for line in ax.get_lines()] == [[1.0, 1.0]]
    assert ax.get_ylabel() == "speed-up (x)" and ax.get_xlabel() == "hardware knob"


def test_efficiency_only_along_resource_counts():
    axes = ps.sweep_plots(_nic_table(), ["batch_per_gpu", "topology.scale_out.nic_bw"])
    assert set(axes) == {"breakdown", "scaling"}  # x defaults to the first swept column
    assert axes["scaling"].get_xlabel() == "batch per GPU (samples)"
    axes = ps.sweep_plots(_nic_table(), None, x="topology.scale_out.nic_bw")
    assert set(axes) == {"breakdown", "scaling"}
    with pytest.raises(ValueError, match="scaling efficiency"):
        ps.plot_scaling_efficiency(_nic_table(), x="batch_per_gpu")


def test_breakdown_bars_in_grid_order():
    labels = [t.get_text() for t in ps.plot_breakdown(_nic_table(), label="point_id")
              .get_xticklabels()]  # fmt: skip
    assert labels == list(_nic_table()["point_id"])


def test_compare_title_fits_the_figure(table):
    """Long run names (folder names with hashes) wrap instead of running off the figure."""
    ok = table[table["status"] == "ok"]
    names = ("neo_model_a_zionex_16n_b2c728be", "neo_model_a_zionex_16n_nic400_4f1e9a07")
    ax = ps.plot_compare(ok[ok["topology"] == "zion"], ok[ok["topology"] == "zionex"],
                         names=names)  # fmt: skip
    fig = ax.figure
    fig.canvas.draw()
    box = ax.title.get_window_extent(fig.canvas.get_renderer())
    assert 0 <= box.x0 and box.x1 <= fig.bbox.x1
    assert names[1] in ax.get_title().replace("\n", " ")


def test_cli_plot_x_with_unit_strings(tmp_path, capsys):
    """`zionsim plot DIR --x topology.scale_out.nic_bw` on a sweep over NIC speeds."""
    from zionsim.cli.main import main
    from zionsim.studies.sweep import run_sweep, sweep_from_dict

    sweep = {
        "base": {"topology": TINY, "workload": "tiny", "iterations": 2},
        "grid": {"topology.scale_out.nic_bw": ["400Gbps", "100Gbps"]},
    }
    run_sweep(sweep_from_dict(sweep), tmp_path / "sw", workers=1, progress=False)
    assert main(["plot", str(tmp_path / "sw"), "--x", "topology.scale_out.nic_bw"]) == 0
    names = sorted(p.name for p in (tmp_path / "sw" / "plots").glob("*.png"))
    assert names == ["breakdown.png", "scaling.png"]
    capsys.readouterr()
    assert main(["plot", str(tmp_path / "sw"), "--x", "nic"]) == 2
    assert "--x" in capsys.readouterr().err


@pytest.fixture(autouse=True)
def _close_figures():
    """Each test's figures are closed after it (matplotlib keeps pyplot figures open)."""
    yield
    import matplotlib.pyplot as plt

    plt.close("all")


def test_doubling_grid_gets_a_log2_axis():
    """100, 200, 400, 800 Gb/s (not powers of two, but a doubling grid) on a base-2 axis."""
    df = pd.DataFrame({"nic": [100e9, 200e9, 400e9, 800e9], "samples_per_s": [1.0, 2, 3, 4],
                       "status": "ok"})  # fmt: skip
    ax = ps.plot_scaling(df, x="nic")
    assert ax.get_xscale() == "log" and ax.xaxis.get_transform().base == 2
    uneven = ps.plot_scaling(df.assign(nic=[100e9, 150e9, 400e9, 800e9]), x="nic")
    assert uneven.get_xscale() == "linear"


def test_compare_bars_are_labelled_a_and_b(run):
    """Without row labels each bar's tick names its run."""
    from zionsim.sim.results import summary_row

    row = pd.DataFrame([summary_row(run.summary)])
    ax = ps.plot_compare(row, row, names=("before", "after"))
    assert [t.get_text() for t in ax.get_xticklabels()] == ["before", "after"]
