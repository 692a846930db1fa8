"""Round 21z's runner and independent check for ``probe_fuzz.py``'s graphs.

``run_all``: the zoo's CLI cases (``tests/zoo/zoo_cases.run_case``, the same command lines and pass / typed /
crash classification as ``../zoo.py``) launched from a preloaded fork server (``launch="fork"``: hundreds of tiny
graphs, the imports paid once), one at a time, results into ``JSON``.

``check_work``: every passing ``arm-cpu fp32`` ``.tflite`` (LiteRT ``Interpreter``) and ``intel-vpu fp16`` IR
(OpenVINO ``Core``) run on fresh random inputs (not the data edgekit verified on) and compared with onnxruntime
running the source graph, independent of edgekit's own verification: fp32 max error of the output range, FP16
cosine. Each artifact runs in a child process (LiteRT can abort).

    python benchmarks/zoo/probe_fuzz_check.py run --cases "arm-cpu fp32,intel-vpu fp16,quantize" --work W --json r.json
    python benchmarks/zoo/probe_fuzz_check.py check --work W --json r.json
"""

from __future__ import annotations

import argparse
import collections
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "zoo"))
import zoo_cases  # noqa: E402
import zoo_data  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / ".zoo" / "probe21z"
FP32_TOL = 1e-4
FP16_COS = 0.999


def run_all(
    manifest: Path,
    cases: list[str],
    work: Path,
    only: set[str] | None,
    timeout: float,
    plan: list | None = None,
) -> list[dict]:
    entries = zoo_data.load_manifest(manifest)["models"]
    results: list[dict] = []
    partial = work / "partial.json"
    start = time.time()
    entries = [e for e in entries if not only or e["name"] in only]
    models = []
    for entry in entries:
        c, e = zoo_data.write_data(entry, work / "data", calib=8, evaluation=8, source=manifest.parent)
        models.append(
            zoo_cases.Model(
                entry["name"], manifest.parent / entry["file"], entry["kind"], entry["inputs"], c, e
            )
        )
    order = [(case, n) for case in cases for n in range(len(entries))]  # case by case
    if plan:  # [[model, case], ...] in that order
        index = {e["name"]: n for n, e in enumerate(entries)}
        order = [(case, index[name]) for name, case in plan if name in index]
    for case, n in order:
        if True:
            entry, model = entries[n], models[n]
            r = zoo_cases.run_case(model, case, work, timeout, launch="fork")
            results.append({"model": r.model, "case": case, "outcome": r.outcome, "error": r.error,
                            "seconds": r.seconds, "out_dir": r.out_dir, "op": entry.get("op"),
                            "group": entry.get("group"), "note": entry.get("note")})  # fmt: skip
            if r.outcome != "pass":
                print(f"[{n}] {r.model} {case}: {r.outcome} {r.error}", flush=True)
            partial.write_text(json.dumps(results, indent=1))
    print(f"{len(results)} cases in {time.time() - start:.0f} s")
    return results


def _artifact(out_dir: Path, suffix: str) -> Path | None:
    found = sorted(out_dir.rglob(f"*{suffix}"))
    return found[0] if found else None


def _child_batch(jobs_path: str) -> None:
    """(In a child.) Each job of ``jobs_path``: one ``RESULT`` line (the child dies with an aborting runtime: the
    parent runs what is left one by one)."""
    for job in json.loads(Path(jobs_path).read_text()):
        print(f"JOB {job['id']}", flush=True)
        try:
            _child_run(job["kind"], job["artifact"], job["model"], job["feeds"])
        except Exception as e:  # noqa: BLE001
            print(
                "RESULT " + json.dumps([{"output": "?", "problem": f"{type(e).__name__}: {e}"[:300]}]),
                flush=True,
            )


def _child_run(kind: str, artifact: str, model: str, feeds_path: str) -> None:
    """(In a child.) Run the artifact and onnxruntime on the stored feeds; print the comparison as JSON."""
    import onnxruntime as ort

    feeds = dict(np.load(feeds_path))
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    ref = sess.run(None, feeds)
    names = [o.name for o in sess.get_outputs()]
    if kind == "tflite":
        from ai_edge_litert.interpreter import Interpreter

        manifest = json.loads((Path(artifact).parent / "manifest.json").read_text())
        layout = {io["name"]: io.get("layout") for io in [*manifest["inputs"], *manifest["outputs"]]}
        it = Interpreter(model_path=artifact)
        it.allocate_tensors()
        by_name = {d["name"]: d for d in it.get_input_details()}
        ins = it.get_input_details()
        for i, (k, v) in enumerate(feeds.items()):
            d = by_name.get(k, ins[i])
            if layout.get(k) == "NHWC":  # channels last at the bundle's border
                v = np.moveaxis(v, 1, -1)
            it.set_tensor(d["index"], np.ascontiguousarray(v.astype(d["dtype"])).reshape(d["shape"]))
        it.invoke()
        outs_d = it.get_output_details()
        got_by = {d["name"]: it.get_tensor(d["index"]) for d in outs_d}
        got = [got_by.get(n, it.get_tensor(outs_d[i]["index"])) for i, n in enumerate(names)]
        got = [
            np.moveaxis(g, -1, 1) if layout.get(n) == "NHWC" else g for g, n in zip(got, names, strict=True)
        ]
    else:
        import openvino as ov

        core = ov.Core()
        compiled = core.compile_model(core.read_model(artifact), "CPU")
        res = compiled(feeds)
        got = []
        for i, n in enumerate(names):
            port = next((p for p in compiled.outputs if n in p.get_names()), compiled.outputs[i])
            got.append(res[port])
    report = []
    for n, r, o in zip(names, ref, got, strict=True):
        r = np.asarray(r, np.float64)
        o = np.asarray(o, np.float64)
        if r.size != o.size:
            report.append({"output": n, "problem": f"shape {list(o.shape)} vs {list(r.shape)}"})
            continue
        o = o.reshape(r.shape)
        rng = float(np.ptp(r)) or 1.0
        err = float(np.max(np.abs(o - r))) / rng if r.size else 0.0
        den = float(np.linalg.norm(o) * np.linalg.norm(r))
        cos = float(np.dot(o.ravel(), r.ravel()) / den) if den > 0 else (1.0 if np.allclose(o, r) else 0.0)
        report.append(
            {"output": n, "rel_err": err, "cos": cos, "shape_equal": list(o.shape) == list(r.shape)}
        )
    print("RESULT " + json.dumps(report), flush=True)


def fresh_feeds(kind: str, model: Path, inputs: list[dict], seed: int, work: Path) -> Path:
    rng = np.random.default_rng(seed)
    feeds = {}
    positive = False
    stored = np.load(model.with_name(model.stem + ".samples.npz"))
    positive = all(float(stored[i["name"]].min()) > 0 for i in inputs)
    for i in inputs:
        x = rng.standard_normal(i["shape"]).astype(np.float32) * 1.5
        feeds[i["name"]] = (np.abs(x) + 0.25).astype(np.float32) if positive else x
    path = work / f"fresh_{model.stem}_{kind}.npz"
    np.savez(path, **feeds)
    return path


def run_jobs(jobs: list[dict], work: Path) -> dict[int, dict]:
    """``{job id: {"outputs": [...]} or {"problem": ...}}``, batches in children, a job that kills its child
    reported as such."""
    done: dict[int, dict] = {}
    pending = list(jobs)
    while pending:
        path = work / "jobs.json"
        path.write_text(json.dumps(pending))
        p = subprocess.run(
            [sys.executable, __file__, "batch", str(path)], capture_output=True, text=True, timeout=3600
        )
        current = None
        for line in p.stdout.splitlines():
            if line.startswith("JOB "):
                current = int(line[4:])
            elif line.startswith("RESULT ") and current is not None:
                done[current] = {"outputs": json.loads(line[7:])}
                current = None
        if current is not None and current not in done:  # the child died in this job
            done[current] = {
                "problem": f"child exit {p.returncode}: {(p.stderr.strip().splitlines() or ['?'])[-1][:200]}"
            }
        rest = [j for j in pending if j["id"] not in done]
        if len(rest) == len(pending):
            for j in rest:
                done[j["id"]] = {"problem": f"child exit {p.returncode}"}
            break
        pending = rest
    return done


def check_work(results_json: Path, manifest: Path, work: Path) -> list[dict]:
    results = json.loads(results_json.read_text())
    entries = {e["name"]: e for e in zoo_data.load_manifest(manifest)["models"]}
    checked, jobs = [], []
    for r in results:
        if r["outcome"] != "pass" or r["case"] not in ("arm-cpu fp32", "intel-vpu fp16"):
            continue
        kind, suffix = ("tflite", ".tflite") if r["case"] == "arm-cpu fp32" else ("ir", ".xml")
        art = _artifact(Path(r["out_dir"]), suffix)
        entry = entries[r["model"]]
        model = manifest.parent / entry["file"]
        if art is None:
            checked.append({**r, "check": {"problem": "no artifact"}, "wrong": True})
            continue
        feeds = fresh_feeds(kind, model, entry["inputs"], 2121, work)
        jobs.append({"id": len(jobs), "kind": kind, "artifact": str(art), "model": str(model), "feeds": str(feeds),
                     "r": r})  # fmt: skip
    done = run_jobs(jobs, work)
    for job in jobs:
        r, kind, c = job["r"], job["kind"], done[job["id"]]
        wrong = "problem" in c or any(
            "problem" in o or (o["rel_err"] > FP32_TOL if kind == "tflite" else o["cos"] < FP16_COS)
            for o in c["outputs"]
        )  # fmt: skip
        checked.append({**r, "check": c, "wrong": wrong})
        if wrong:
            print(f"WRONG {r['model']} {r['case']} ({r.get('note')}): {c}", flush=True)
    return checked


def main(argv: list[str] | None = None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "batch":
        _child_batch(sys.argv[2])
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=("run", "check", "summary"))
    ap.add_argument("--manifest", type=Path, default=OUT / "zoo.json")
    ap.add_argument("--cases", default="arm-cpu fp32,intel-vpu fp16,quantize")
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--json", type=Path, required=True)
    ap.add_argument("--only")
    ap.add_argument("--plan", type=Path, help="a JSON list of [model, case] pairs: run those, in that order")
    ap.add_argument("--timeout", type=float, default=300)
    args = ap.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    if args.mode == "run":
        plan = json.loads(args.plan.read_text()) if args.plan else None
        only = set(args.only.split(",")) if args.only else None
        res = run_all(args.manifest, args.cases.split(","), args.work, only, args.timeout, plan)
        args.json.write_text(json.dumps(res, indent=1))
    elif args.mode == "check":
        res = check_work(args.json, args.manifest, args.work)
        args.json.with_suffix(".check.json").write_text(json.dumps(res, indent=1))
        print(f"{sum(r['wrong'] for r in res if 'wrong' in r)} wrong of {len(res)} checked")
    else:
        res = json.loads(args.json.read_text())
        table: dict[tuple[str, str], collections.Counter] = collections.defaultdict(collections.Counter)
        for r in res:
            table[(r["group"], r["case"])][r["outcome"]] += 1
        for (grp, case), c in sorted(table.items()):
            print(f"| {grp} | {case} | {c['pass']} | {c['typed']} | {c['crash']} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
