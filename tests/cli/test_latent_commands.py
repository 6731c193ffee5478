"""``ladd encode`` and ``ladd sample --like/--latents/--interpolate/--guidance`` on tiny trained runs: output order and
format, encode-then-latents equal to like, exports, prompts, and every refusal before sampling."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safety_cases import BOUNDED_MEMORY, ladd_process
from support import TINY, TWO_STAGES

import registry
from registry.cli import main
from registry.config.composition import compose
from registry.training.loop import train

pytestmark = pytest.mark.slow  # tiny training runs

REFERENCES = "0 1 1 0 1 0 0 1 1 1 0 0 1 0 1 1\n1 1 1 1 0 0 0 0 1 1 1 1 0 0 0 0\n0 0 1 1 0 0 1 1 0 0 1 1 0 0 1 1\n"
TEXT_REFERENCES = "to be or not to be\nthe king is dead\n"


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """Tiny trained runs: sequential and joint Co-LADD, Di-LADD (trained for both samplers), MDLM, the text demo."""
    root, reg = tmp_path_factory.mktemp("runs"), registry.load()
    text = ["dataset.seq_len=16", "train.batch_size=4", "train.progress=false", "encoder.cache_dir=null",
            "train.stages=[{steps:2,lambda_latent:1.0,freeze_encoder:true}]"]
    chosen = {
        "coladd_seq": ["experiment=binsaw/coladd_seq_cpu", *TINY, TWO_STAGES],
        "coladd_joint": ["experiment=binsaw/coladd_joint_cpu", *TINY, TWO_STAGES],
        "diladd": ["experiment=binsaw/diladd_seq_cpu", *TINY, TWO_STAGES],
        "mdlm": ["experiment=binsaw/mdlm_cpu", *TINY, "train.stages=[{steps:2}]"],
        "text": ["experiment=demo/coladd", *text],
    }
    for name, overrides in chosen.items():
        train(compose(overrides, reg), root / name, reg)
    return {name: root / name for name in chosen}


@pytest.fixture()
def files(tmp_path) -> dict[str, Path]:
    found = {"ids": tmp_path / "refs.txt", "two": tmp_path / "two.txt", "text": tmp_path / "refs_text.txt"}
    found["ids"].write_text(REFERENCES)
    found["two"].write_text("".join(REFERENCES.splitlines(keepends=True)[:2]))
    found["text"].write_text(TEXT_REFERENCES)
    return found


def ladd(capsys, *args: object) -> tuple[int, str, str]:
    """The exit status, output and errors of the ladd command, run in this process."""
    try:
        status = main([str(a) for a in args])
    except SystemExit as exit:  # argparse refuses an argument by exiting
        status = exit.code
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def ids(path: Path) -> list[list[int]]:
    return [[int(v) for v in line.split()] for line in path.read_text().splitlines()]


@pytest.mark.parametrize(
    ("run", "sampler"), [("coladd_seq", None), ("coladd_joint", None), ("diladd", None), ("diladd", "joint")]
)
def test_encode_then_latents_gives_the_samples_of_like_in_reference_order(runs, files, tmp_path, capsys, run, sampler):
    chosen = ["--sampler", sampler] if sampler else []
    latents, like, given = tmp_path / "lat.safetensors", tmp_path / "like.txt", tmp_path / "given.txt"
    assert ladd(capsys, "encode", runs[run], "--input", files["ids"], "--out", latents)[0] == 0
    common = ["--num", 4, "--steps", 4, "--seed", 7, *chosen]
    status, out, _ = ladd(capsys, "sample", runs[run], "--like", files["ids"], "--out", like, *common)
    assert status == 0 and "12 samples (4 per reference, 3 references)" in out
    assert ladd(capsys, "sample", runs[run], "--latents", latents, "--out", given, *common)[0] == 0
    assert like.read_text() == given.read_text()
    rows = ids(like)
    assert len(rows) == 12 and all(len(row) == 16 and set(row) <= {0, 1} for row in rows)


def test_an_exported_model_encodes_to_the_same_latents_its_run_reads(runs, files, tmp_path, capsys):
    export, latents = tmp_path / "export", tmp_path / "lat.safetensors"
    assert ladd(capsys, "export", runs["diladd"], export)[0] == 0
    assert ladd(capsys, "encode", export, "--input", files["ids"], "--out", latents)[0] == 0
    outputs = [tmp_path / "from_run.txt", tmp_path / "from_export.txt"]
    for source, out in zip((runs["diladd"], export), outputs, strict=True):
        assert ladd(capsys, "sample", source, "--latents", latents, "--num", 2, "--steps", 4, "--out", out)[0] == 0
    assert outputs[0].read_text() == outputs[1].read_text()


def test_interpolation_gives_num_samples_at_each_point(runs, files, tmp_path, capsys):
    for run in ("coladd_seq", "diladd"):
        out = tmp_path / f"{run}.txt"
        status, printed, _ = ladd(capsys, "sample", runs[run], "--interpolate", files["two"], "--points", 3, "--num", 2,
                                  "--steps", 4, "--out", out)
        assert status == 0 and "6 samples (2 per point, 3 points)" in printed
        assert len(ids(out)) == 6


def test_guidance_one_is_no_guidance_and_more_doubles_the_network_calls(runs, files, tmp_path, capsys):
    outputs = {}
    for label, extra in (("plain", []), ("one", ["--guidance", 1]), ("three", ["--guidance", 3])):
        outputs[label] = tmp_path / f"{label}.txt"
        like = ["--like", files["ids"], "--num", 2, "--steps", 4, "--out", outputs[label]]
        status, printed, _ = ladd(capsys, "sample", runs["coladd_seq"], *like, *extra)
        assert status == 0
        outputs[label + " calls"] = int(printed.split(" network calls")[0].rsplit(" ", 1)[1])
    assert outputs["plain"].read_text() == outputs["one"].read_text()
    assert outputs["three calls"] == 2 * outputs["plain calls"]


def test_text_rows_carry_the_reference_or_point_and_keep_an_infills_context(runs, files, tmp_path, capsys):
    like, path = tmp_path / "like.jsonl", tmp_path / "path.jsonl"
    status, _, _ = ladd(capsys, "sample", runs["text"], "--like", files["text"], "--num", 3, "--steps", 4,
                        "--prompt", "to be", "--suffix", "the end", "--out", like)
    assert status == 0
    rows = [json.loads(line) for line in like.read_text().splitlines()]
    assert [row["reference"] for row in rows] == [0, 0, 0, 1, 1, 1]
    prompt, suffix = rows[0]["ids"][:2], rows[0]["ids"][-2:]
    assert all(row["ids"][:2] == prompt and row["ids"][-2:] == suffix for row in rows), "an infill given each latent"
    assert all(row["text"].startswith("to be") and row["text"].endswith("the end") for row in rows)
    assert ladd(capsys, "sample", runs["text"], "--interpolate", files["text"], "--points", 2, "--num", 2, "--steps", 4,
                "--out", path)[0] == 0
    assert [json.loads(line)["point"] for line in path.read_text().splitlines()] == [0, 0, 1, 1]


def _refused(capsys, out: Path, *args: object) -> str:
    status, _, err = ladd(capsys, *args)
    assert status == 2 and not out.exists(), "refused before anything was written"
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ladd: error: "), err
    return lines[0]


def test_every_bad_input_is_refused_in_one_line_before_sampling(runs, files, tmp_path, capsys):
    out, latents, codes = tmp_path / "out.txt", tmp_path / "lat.safetensors", tmp_path / "codes.safetensors"
    assert ladd(capsys, "encode", runs["coladd_seq"], "--input", files["ids"], "--out", latents)[0] == 0
    assert ladd(capsys, "encode", runs["diladd"], "--input", files["ids"], "--out", codes)[0] == 0
    empty, binary, outside, three = (tmp_path / f"{name}.txt" for name in ("empty", "binary", "outside", "three"))
    empty.write_text("")
    binary.write_bytes(b"0 1 \xfe\n")
    outside.write_text("0 1 2 1 0 1 0 1 0 1 0 1 0 1 0 1\n")
    three.write_text(REFERENCES)
    run, mdlm, references = runs["coladd_seq"], runs["mdlm"], files["ids"]
    cases = {
        "ladd sample --like needs a model with a latent channel": ("sample", mdlm, "--like", references),
        "ladd encode needs a model with a latent channel": ("encode", mdlm, "--input", references, "--out", out),
        "holds no reference (it is empty or blank)": ("sample", run, "--like", empty),
        "is not UTF-8 text": ("sample", run, "--interpolate", binary),
        "holds id 2, outside this model's vocabulary of 2 ids": ("encode", run, "--input", outside, "--out", out),
        "was encoded by another model (weights": ("sample", run, "--latents", codes),  # Di-LADD's codes, Co-LADD's run
        "was encoded by another model": ("sample", runs["coladd_joint"], "--latents", latents),
        "--num: '0' is not a whole number >= 1": ("sample", run, "--like", files["ids"], "--num", 0),
        "--points: '1' is not a whole number >= 2": ("sample", run, "--interpolate", files["two"], "--points", 1),
        "--like FILE and --latents FILE both give": ("sample", run, "--like", references, "--latents", latents),
        "--interpolate needs two references": ("sample", run, "--interpolate", three),
        "--points sets how many latents --interpolate FILE samples at": ("sample", run, "--points", 3),
        "sampler 'ancestral' has no guidance option": ("sample", mdlm, "--guidance", 2),
    }
    for message, args in cases.items():
        command = [*args, "--out", out] if args[0] == "sample" else list(args)
        assert message in _refused(capsys, out, *command), message


def test_latents_of_another_dtype_or_out_of_float_range_and_huge_jobs_are_one_line(runs, files, tmp_path, capsys):
    """Codes saved as floats or bytes are refused naming the dtype, finite latents too large for float arithmetic
    name their size, and a job too large for memory is refused before its latents are repeated or interpolated."""
    from registry.engine.latents import load_latents, save_latents
    from registry.engine.loading import load_run

    reg, out = registry.load(), tmp_path / "out.txt"
    codes, latents = tmp_path / "codes.safetensors", tmp_path / "lat.safetensors"
    assert ladd(capsys, "encode", runs["diladd"], "--input", files["ids"], "--out", codes)[0] == 0
    assert ladd(capsys, "encode", runs["coladd_seq"], "--input", files["ids"], "--out", latents)[0] == 0
    diladd, coladd = (load_run(runs[name], reg)[0].model for name in ("diladd", "coladd_seq"))
    given = {"float32": load_latents(codes, diladd).float(), "uint8": load_latents(codes, diladd).to(torch.uint8)}
    for dtype, converted in given.items():
        save_latents(tmp_path / f"{dtype}.safetensors", diladd, converted)
        message = _refused(capsys, out, "sample", runs["diladd"], "--latents", tmp_path / f"{dtype}.safetensors",
                           "--out", out)
        assert f"holds latents torch.{dtype} of shape [" in message and "the file was converted or edited" in message
    save_latents(tmp_path / "huge.safetensors", coladd, torch.full_like(load_latents(latents, coladd), 1e30))
    message = _refused(capsys, out, "sample", runs["coladd_seq"], "--latents", tmp_path / "huge.safetensors",
                       "--steps", 2, "--out", out)
    assert "the clean latents given reach 1e+30 in magnitude" in message
    message = _refused(capsys, out, "sample", runs["coladd_seq"], "--like", files["ids"], "--num", 2 * 10**10,
                       "--out", out)
    assert "60000000000 samples of length 16 in chunks of 1000 need at least" in message


def test_an_interpolation_of_a_billion_points_is_refused_before_it_is_built(runs, files, tmp_path):
    out = tmp_path / "out.txt"
    outcome = ladd_process("sample", str(runs["coladd_seq"]), "--interpolate", str(files["two"]), "--points",
                           str(10**9), "--num", "1", "--out", str(out), limit_memory=BOUNDED_MEMORY)
    assert outcome.code == 2 and "1000000000 samples of length 16 in chunks of 1000 need at least" in outcome.message
    assert len(outcome.message.splitlines()) == 1 and not out.exists()


def test_a_reference_line_of_megabytes_is_cut_before_it_is_tokenised(runs, tmp_path, capsys):
    line = "to be or not to be that is the question " * 250_000  # 10 MB
    (tmp_path / "long.txt").write_text(line + "\n")
    (tmp_path / "short.txt").write_text(line[:400] + "\n")
    for name in ("long", "short"):
        status, _, err = ladd(capsys, "encode", runs["text"], "--input", tmp_path / f"{name}.txt", "--out",
                              tmp_path / f"{name}.safetensors")
        assert status == 0 and "1 reference(s) longer than the model's 16 tokens cut to 16" in err
    from safetensors.torch import load_file

    long, short = (load_file(tmp_path / f"{name}.safetensors")["latents"] for name in ("long", "short"))
    assert torch.equal(long, short), "the first 16 tokens of the line, however long it is"
