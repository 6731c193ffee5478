"""What ladd does around any importer (``registry.engine.importing``): a plugin's mistake is one line naming the plugin,
an importer of the previous contract is told what changed, and a kill while the folder is written leaves nothing that
stops the next import."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from mdlm_reference import write_checkpoint

import registry
from registry.config.composition import compose
from registry.engine.assembly import build_experiment
from registry.engine.importing import import_checkpoint
from registry.errors import LaddError
from registry.host.component import Origin
from registry.host.model_folders import PluginImporter

FAULTY = '''
    from pathlib import Path

    from registry.interfaces import Importer


    class Base(Importer):
        def read(self, source):
            return Path(source)

        def overrides(self, checkpoint):
            return ["experiment=binsaw/mdlm_cpu", "backbone.hidden=16", "backbone.layers=1", "backbone.heads=2"]

        def fill(self, model, checkpoint):
            for parameter in model.parameters():
                parameter.zero_()

        def record(self, checkpoint):
            return {"folder": checkpoint.name}

        def files(self, checkpoint):
            return []


    class Raising(Base):
        def fill(self, model, checkpoint):
            model.backbone.no_such_layer.weight.zero_()


    class Partial(Base):
        def fill(self, model, checkpoint):
            model.backbone.embed.weight.zero_()


    class Misspelt(Base):
        def overrides(self, checkpoint):
            return [*super().overrides(checkpoint), "backbone.hiden=16", "backbone.layer=1"]


    class Carrying(Base):
        def carried(self, checkpoint):
            return {"notes/readme.txt": checkpoint / "readme.txt"}


    class Escaping(Base):
        def carried(self, checkpoint):
            return {"../readme.txt": checkpoint / "readme.txt"}


    class Clobbering(Base):
        def carried(self, checkpoint):
            return {"config.json": checkpoint / "readme.txt"}


    class Linking(Base):
        def carried(self, checkpoint):
            link = checkpoint.parent / "link.txt"
            link.unlink(missing_ok=True)
            link.symlink_to(checkpoint.parent / "private.txt")
            return {"readme.txt": link}


    class Missing(Base):
        def carried(self, checkpoint):
            return {"readme.txt": checkpoint / "absent.txt"}


    def older(source, out_dir, overrides, registry, overwrite):
        raise AssertionError("never called")
'''


@pytest.fixture(scope="module")
def reg():
    return registry.load()


@pytest.fixture(scope="module")
def faulty(tmp_path_factory):
    folder = tmp_path_factory.mktemp("faulty")
    (folder / "faulty_importers.py").write_text(textwrap.dedent(FAULTY))
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(folder))
        origin = Origin("faulty", "faulty-dist", "1.0")
        yield lambda name: PluginImporter(name.lower(), f"faulty_importers:{name}", origin)


def test_the_base_importer_imports(faulty, reg, tmp_path):
    out = import_checkpoint(faulty("Base"), str(tmp_path), tmp_path / "out", [], reg)
    source = json.loads((out / "config.json").read_text())["source"]
    assert source == {"importer": "faulty:base", "folder": tmp_path.name, "files": {}}


def test_the_files_an_importer_carries_are_copied_into_the_folder_and_listed(faulty, reg, tmp_path):
    (tmp_path / "readme.txt").write_text("carried")
    out = import_checkpoint(faulty("Carrying"), str(tmp_path), tmp_path / "out", [], reg)
    assert (out / "notes" / "readme.txt").read_text() == "carried"
    assert json.loads((out / "config.json").read_text())["carries"] == ["notes/readme.txt"]


@pytest.mark.parametrize("name, message", [
    ("Escaping", "importer 'escaping' of plugin 'faulty' (faulty-dist 1.0): carried() names '../readme.txt', which is "
     "no path inside a model folder beside its own files"),
    ("Clobbering", "importer 'clobbering' of plugin 'faulty' (faulty-dist 1.0): carried() names 'config.json', which "
     "is no path inside a model folder beside its own files"),
    ("Missing", "importer 'missing' of plugin 'faulty' (faulty-dist 1.0): carried() gives {source}/absent.txt for "
     "'readme.txt', which is not a file"),
])
def test_a_carried_file_outside_the_folder_over_its_own_files_or_missing_is_refused(name, message, faulty, reg,
                                                                                   tmp_path):
    (tmp_path / "readme.txt").write_text("carried")
    with pytest.raises(LaddError) as refused:
        import_checkpoint(faulty(name), str(tmp_path), tmp_path / "out", [], reg)
    assert str(refused.value) == message.format(source=tmp_path)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name, message", [
    ("Raising", "importer 'raising' of plugin 'faulty' (faulty-dist 1.0) failed in fill(): AttributeError: "),
    ("Partial", "importer 'partial' of plugin 'faulty' (faulty-dist 1.0) left {left} parameter(s) unfilled or not "
     "finite after fill() (first: backbone.condition): fill() must write every parameter of the model its overrides "
     "build; fix or update plugin 'faulty'"),
    ("Misspelt", "importer 'misspelt' of plugin 'faulty' (faulty-dist 1.0) gives config overrides that ladd refuses: "
     "backbone.hiden=16 (backbone.hiden: backbone 'dit' has no option 'hiden'; did you mean 'hidden'?"),
    ("older", "importer 'older' of plugin 'faulty' (faulty-dist 1.0) declares no contract version (LADD_CONTRACT) and "
     "predates contract 3: its faulty_importers:older is a function that wrote the model folder itself; since "
     "contract 3 an importer is a registry.interfaces.Importer"),
])
def test_an_importers_mistake_is_one_line_naming_its_plugin_and_nothing_is_written(name, message, faulty, reg,
                                                                                  tmp_path):
    overrides = ["experiment=binsaw/mdlm_cpu", "backbone.hidden=16", "backbone.layers=1", "backbone.heads=2"]
    parameters = list(build_experiment(compose(overrides, reg), reg).model.named_parameters())
    with pytest.raises(LaddError) as refused:
        import_checkpoint(faulty(name), str(tmp_path), tmp_path / "out", [], reg)
    message = message.format(left=len([n for n, _ in parameters if n != "backbone.embed.weight"]))
    assert str(refused.value).startswith(message) and "\n" not in str(refused.value)
    assert not (tmp_path / "out").exists()
    if name == "Misspelt":
        assert "; backbone.layer=1 (backbone.layer: backbone 'dit' has no option 'layer'" in str(refused.value)


_KILLED_WHILE_WRITING = """
import os, signal, sys
import registry.storage.weights as weights

def killed(model, path, metadata=None):  # as safetensors does: a temporary file beside the target, then the kill
    with open(os.path.join(os.path.dirname(path), ".tmpAbC123"), "wb") as handle:
        handle.write(b"partial")
    os.kill(os.getpid(), signal.SIGKILL)

weights.save_model = killed
from registry.cli import main
main(["import", *sys.argv[1:]])
"""


@pytest.mark.slow  # killed processes
@pytest.mark.parametrize("importer", ["mdlm", "llada"])
def test_a_kill_while_the_folder_is_written_leaves_nothing_that_stops_a_second_import(importer, reg, tmp_path):
    from llada_reference import write_checkpoint as write_llada
    from support import import_with

    source, out = tmp_path / importer, tmp_path / "out"
    if importer == "mdlm":
        write_checkpoint(source, hidden=16, blocks=1, heads=2, cond=8, time_conditioning=False, length=16)
    else:
        write_llada(source, shards=1)
    overrides = [] if importer == "mdlm" else ["dataset.seq_len=16"]
    command = [sys.executable, "-c", _KILLED_WHILE_WRITING, importer, str(source), str(out), *overrides]
    killed = subprocess.run(command, timeout=300)
    assert killed.returncode == -9
    left = [path.relative_to(out).parts for path in out.rglob("*") if path.is_file()]
    assert left and all(any(".ladd-" in part for part in parts) for parts in left), left
    import_with(importer, str(source), out, overrides, reg)
    written = sorted(str(p.relative_to(out)) for p in out.iterdir())
    assert written == ["README.md", "config.json", "model.safetensors", *(["tokenizer"] if importer == "llada" else [])]
    subprocess.run([*command, "--overwrite"], timeout=300)
    import_with(importer, str(source), out, overrides, reg, overwrite=True)
    assert sorted(str(p.relative_to(out)) for p in out.iterdir()) == written
    assert not list(out.rglob("*.partial"))


def test_a_scratch_folder_is_ladds_temporary_removed_with_what_it_holds_once_its_writer_is_gone(tmp_path):
    import os

    from registry.storage.files import is_abandoned, remove_partials, scratch_folder

    with scratch_folder(tmp_path / "model.safetensors") as running:
        (running / ".tmpXyZ").write_bytes(b"safetensors' own temporary")
        assert not is_abandoned(running)
        remove_partials(tmp_path)
        assert running.is_dir(), "a running writer's folder stays"
        gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
        abandoned = tmp_path / running.name.replace(f"-{os.getpid()}-", f"-{gone.stdout.strip()}-")
        running.rename(abandoned)
        remove_partials(tmp_path)
        assert not abandoned.exists()
        running.mkdir()  # so that leaving the block has its folder to remove
    assert list(tmp_path.iterdir()) == []


def _linked(source, private):
    """A link in the source to a private file outside it (``chat_template.jinja``, as a shared folder could hold)."""
    (source / "chat_template.jinja").symlink_to(private)


def _linked_below(source, private):
    (source / "tokenizer").mkdir()
    (source / "tokenizer" / "notes.txt").symlink_to(private)


def _fifo(source, private):
    os.mkfifo(source / "tokenizer.json")


@pytest.mark.parametrize("plant, what", [
    (_linked, "{source}/chat_template.jinja is a symbolic link (to {private}): a checkpoint ladd imports is read only "
     "from the regular files inside {source}"),
    (_linked_below, "{source}/tokenizer/notes.txt is a symbolic link (to {private}): a checkpoint ladd imports"),
    (_fifo, "{source}/tokenizer.json is a FIFO (named pipe), not a regular file: a checkpoint ladd imports is read "
     "only from regular files inside {source}"),
])
def test_a_link_or_special_file_in_a_local_source_is_refused_before_the_importer_reads_it(plant, what, faulty, reg,
                                                                                          tmp_path):
    source, private = tmp_path / "src", tmp_path / "private.txt"
    source.mkdir()
    private.write_text("a private key")
    (source / "readme.txt").write_text("carried")
    plant(source, private)
    with pytest.raises(LaddError) as refused:
        import_checkpoint(faulty("Carrying"), str(source), tmp_path / "out", [], reg)
    assert str(refused.value).startswith(what.format(source=source, private=private)), str(refused.value)
    assert not (tmp_path / "out").exists()


def test_a_linked_private_file_is_never_carried_into_a_llada_model_folder_nor_read_from_one(reg, tmp_path):
    from llada_reference import write_checkpoint as write_llada
    from support import import_llada

    source, private = tmp_path / "src", tmp_path / "private.txt"
    write_llada(source, shards=1)
    private.write_text("SECRET {{ messages }}")
    out = import_llada(str(source), tmp_path / "out", ["dataset.seq_len=16"], reg)
    assert (out / "tokenizer" / "chat_template.jinja").is_file()
    (source / "chat_template.jinja").unlink()
    (source / "chat_template.jinja").symlink_to(private)
    with pytest.raises(LaddError, match="chat_template.jinja is a symbolic link"):
        import_llada(str(source), tmp_path / "again", ["dataset.seq_len=16"], reg)
    assert not (tmp_path / "again").exists()
    (out / "tokenizer" / "chat_template.jinja").unlink()
    (out / "tokenizer" / "chat_template.jinja").symlink_to(private)  # a shared model folder planting the same
    with pytest.raises(LaddError) as refused:
        registry.from_pretrained(out, reg)
    assert str(refused.value).startswith(
        f"{out}/tokenizer/chat_template.jinja is a symbolic link (to {private}): what a model folder carries "
        f"(model:tokenizer) is read only from the regular files inside {out}"
    )


def test_a_hub_cache_snapshot_whose_files_link_to_its_blobs_imports(faulty, reg, tmp_path):
    repository = tmp_path / "hub" / "models--owner--name"
    (repository / "blobs").mkdir(parents=True)
    snapshot = repository / "snapshots" / "0123abcd"
    (snapshot / "notes").mkdir(parents=True)
    (repository / "blobs" / "f00d").write_text("carried")
    (snapshot / "readme.txt").symlink_to("../../blobs/f00d")
    (snapshot / "notes" / "more.txt").symlink_to("../../../blobs/f00d")
    out = import_checkpoint(faulty("Carrying"), str(snapshot), tmp_path / "out", [], reg)
    assert (out / "notes" / "readme.txt").read_text() == "carried" and not (out / "notes" / "readme.txt").is_symlink()


def test_a_hub_like_link_that_leaves_its_repository_is_refused(faulty, reg, tmp_path):
    other = tmp_path / "hub" / "models--victim--private" / "blobs"
    other.mkdir(parents=True)
    (other / "key").write_text("private")
    repository = tmp_path / "shared" / "models--owner--name"
    (repository / "blobs").mkdir(parents=True)
    (repository / "blobs" / "f00d").symlink_to(other / "key")
    snapshot = repository / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    (snapshot / "readme.txt").symlink_to("../../blobs/f00d")
    with pytest.raises(LaddError, match="readme.txt is a symbolic link"):
        import_checkpoint(faulty("Carrying"), str(snapshot), tmp_path / "out", [], reg)


def test_a_carried_file_that_is_a_link_is_refused(faulty, reg, tmp_path):
    source, private = tmp_path / "src", tmp_path / "private.txt"
    source.mkdir()
    private.write_text("a private key")
    with pytest.raises(LaddError) as refused:
        import_checkpoint(faulty("Linking"), str(source), tmp_path / "out", [], reg)
    assert str(refused.value) == (
        f"importer 'linking' of plugin 'faulty' (faulty-dist 1.0): carried() gives {private.parent / 'link.txt'} for "
        f"'readme.txt', a symbolic link (to {private}); a model folder carries only regular files, never what a link "
        f"points to"
    )


def _dead_pid() -> int:
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(gone.stdout)


def _abandoned(folder, name: str, pid: int):
    """A temporary file as a writer killed while writing ``folder / name`` leaves it."""
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.ladd-{pid}-0123456789ab.partial")
    partial.write_bytes(b"half")
    return partial


def test_a_kill_while_carried_files_are_written_leaves_nothing_that_stops_a_second_import(faulty, reg, tmp_path):
    source, out, pid = tmp_path / "src", tmp_path / "out", _dead_pid()
    source.mkdir()
    (source / "readme.txt").write_text("carried")
    for name in ("model.safetensors", "config.json", "README.md", "notes/readme.txt"):  # the kill's leftovers
        _abandoned(out, name, pid)
    import_checkpoint(faulty("Carrying"), str(source), out, [], reg)
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == [
        "README.md", "config.json", "model.safetensors", "notes", "notes/readme.txt",
    ]
    _abandoned(out, "notes/readme.txt", pid)
    _abandoned(out, "model.safetensors", pid)
    import_checkpoint(faulty("Carrying"), str(source), out, [], reg, overwrite=True)
    assert not [p for p in out.rglob("*.partial")]


def test_a_folder_of_the_users_beside_a_killed_imports_leftovers_is_never_taken_for_them(faulty, reg, tmp_path):
    source, out, pid = tmp_path / "src", tmp_path / "out", _dead_pid()
    source.mkdir()
    (source / "readme.txt").write_text("carried")
    _abandoned(out, "notes/readme.txt", pid)
    (out / "notes" / "mine.txt").write_text("the user's")
    with pytest.raises(LaddError, match="already exists and is not empty"):
        import_checkpoint(faulty("Carrying"), str(source), out, [], reg)
    with pytest.raises(LaddError, match="is not an exported model"):
        import_checkpoint(faulty("Carrying"), str(source), out, [], reg, overwrite=True)
    assert (out / "notes" / "mine.txt").read_text() == "the user's"
