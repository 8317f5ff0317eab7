"""Models by their Hugging Face hub ids, offline: a tiny model in a hub-cache layout made here.

The layout is huggingface_hub's (docs "Understand caching"): ``<cache>/models--org--name/``
holds ``blobs/<hash>`` (the file contents), ``snapshots/<commit>/<file>`` (symlinks to the
blobs) and ``refs/main`` (the commit hash). Every test blocks the hub API, so a test that
would reach the network fails instead of hanging.
"""

import hashlib
import os
import shutil
from pathlib import Path

import pytest

from policies.models import BUILTIN_MODELS, hub_cache_dir, is_hub_id, is_model_folder, load_model
from rti_actors.config import RTIConfig, _intervention_problems
from rti_actors.options import DEFAULTS

COMMIT = "0123456789abcdef0123456789abcdef01234567"
HUB_ENV = ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")


def write_hub_cache(cache: Path, repo_id: str, model_dir: str) -> Path:
    """Put the files of ``model_dir`` into ``cache`` as huggingface_hub stores a download."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / COMMIT
    for src in sorted(Path(model_dir).rglob("*")):
        if not src.is_file():
            continue
        data = src.read_bytes()
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        link = snapshot / src.relative_to(model_dir)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(COMMIT)
    return snapshot


@pytest.fixture
def no_network(monkeypatch):
    """Clear the hub variables, mark huggingface_hub online, and make any hub API call fail."""
    from huggingface_hub import HfApi, constants

    for key in HUB_ENV:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)

    def network(*args, **kwargs):
        raise AssertionError("the hub was contacted")

    for method in ("repo_info", "model_info", "list_repo_tree", "list_repo_files"):
        monkeypatch.setattr(HfApi, method, network)


@pytest.fixture
def hub_cache(tmp_path, tiny_model_path) -> tuple[Path, Path]:
    cache = tmp_path / "hub"
    return cache, write_hub_cache(cache, "org/tiny", tiny_model_path)


# ---- (1) a cached hub id -------------------------------------------------------------------------
def test_cached_hub_id_offline_via_hf_hub_cache(no_network, hub_cache, monkeypatch):
    cache, snapshot = hub_cache
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    path = load_model("org/tiny")
    assert Path(path).resolve() == snapshot.resolve()
    assert is_model_folder(path)

    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    assert model.config.vocab_size == len(tok)
    assert model(**tok("hello", return_tensors="pt")).logits.shape[-1] == len(tok)


def test_cached_hub_id_via_hf_home(no_network, tmp_path, tiny_model_path, monkeypatch):
    home = tmp_path / "hf_home"
    snapshot = write_hub_cache(home / "hub", "org/tiny", tiny_model_path)
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert hub_cache_dir() == home / "hub"
    assert Path(load_model("org/tiny")).resolve() == snapshot.resolve()


def test_cached_hub_id_is_used_without_the_hub_when_online(no_network, hub_cache, monkeypatch):
    cache, snapshot = hub_cache
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))  # HF_HUB_OFFLINE unset: the cache still comes first
    assert Path(load_model("org/tiny")).resolve() == snapshot.resolve()


# ---- (2) a hub id that is not cached ---------------------------------------------------------------
def test_missing_hub_id_offline_fails_with_the_fix(no_network, hub_cache, monkeypatch):
    cache, _ = hub_cache
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(RuntimeError) as info:
        load_model("Qwen/Qwen3-8B")
    msg = str(info.value)
    assert "'Qwen/Qwen3-8B'" in msg and str(cache) in msg and "models--Qwen--Qwen3-8B" in msg
    assert "HF_HUB_OFFLINE=1" in msg
    assert "hf download Qwen/Qwen3-8B" in msg and "huggingface-cli download Qwen/Qwen3-8B" in msg
    assert "set HF_HOME" in msg and "local model folder" in msg


def test_missing_hub_id_online_is_downloaded_into_the_cache(no_network, tmp_path, tiny_model_path, monkeypatch):
    import huggingface_hub

    cache = tmp_path / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    real, calls = huggingface_hub.snapshot_download, []

    def fake_snapshot_download(repo_id, **kwargs):
        if kwargs.get("local_files_only"):
            return real(repo_id, **kwargs)
        calls.append((repo_id, kwargs))  # stands in for the download: writes what it would write
        return str(write_hub_cache(Path(kwargs["cache_dir"]), repo_id, tiny_model_path))

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot_download)
    path = load_model("org/fresh")
    assert [(r, Path(k["cache_dir"])) for r, k in calls] == [("org/fresh", cache)]
    assert is_model_folder(path) and Path(path).is_relative_to(cache)
    assert load_model("org/fresh") == path and len(calls) == 1  # cached now


def test_failed_download_says_what_to_do(no_network, tmp_path, monkeypatch):
    import huggingface_hub
    from huggingface_hub.errors import LocalEntryNotFoundError

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    real = huggingface_hub.snapshot_download

    def unreachable(repo_id, **kwargs):
        if kwargs.get("local_files_only"):
            return real(repo_id, **kwargs)
        raise LocalEntryNotFoundError("An error happened while trying to locate the files on the Hub")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", unreachable)
    with pytest.raises(RuntimeError, match=r"'org/gone'.*could not be downloaded.*LocalEntryNotFoundError") as info:
        load_model("org/gone")
    assert "hf download org/gone" in str(info.value) and str(tmp_path / "hub") in str(info.value)


def test_hub_repo_without_config_json_is_rejected(no_network, tmp_path, monkeypatch):
    weights_only = tmp_path / "gguf_repo"
    weights_only.mkdir()
    (weights_only / "README.md").write_text("only a GGUF here")
    write_hub_cache(tmp_path / "hub", "org/gguf", str(weights_only))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ValueError, match="no config.json"):
        load_model("org/gguf")


def test_build_turns_an_unresolvable_hub_id_into_a_config_error(no_network, tmp_path, monkeypatch):
    from rti_actors.build import resolve_env_config
    from rti_actors.options import ConfigError

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ConfigError, match=r"env_config\['user_model'\].*'org/missing'.*hf download org/missing"):
        resolve_env_config({"user": "llm", "user_model": "org/missing"}, [], "/policy", None)


# ---- (3) config validation: shape only, nothing resolved ---------------------------------------------
def test_validation_accepts_hub_ids_for_roles_without_resolving(no_network, tmp_path, monkeypatch):
    import huggingface_hub

    def resolve(*args, **kwargs):
        raise AssertionError("validation resolved the model")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", resolve)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for roles in ("Qwen/Qwen3-8B", "org/tiny", "meta-llama/Llama-3.1-8B-Instruct"):
        assert _intervention_problems(dict(DEFAULTS["interventions"], roles=roles)) == []
    (RTIConfig().environment("Navigation-v0").policy(model="Qwen/Qwen3-8B", engine="hf")
     .training(algorithm="rti").interventions(roles="Qwen/Qwen3-8B").validate())
    for roles in ("not a model", "a/b/c", "org/", "/no/such/folder", "org--x/y"):
        (problem,) = _intervention_problems(dict(DEFAULTS["interventions"], roles=roles))
        assert f"roles={roles!r}" in problem and "hub id" in problem


def test_validation_rejects_an_existing_folder_shaped_like_a_hub_id(tmp_path, monkeypatch):
    (tmp_path / "org" / "name").mkdir(parents=True)  # exists, no config.json: load_model would refuse it
    monkeypatch.chdir(tmp_path)
    assert len(_intervention_problems(dict(DEFAULTS["interventions"], roles="org/name"))) == 1


# ---- (4) built-in names and local folders are unchanged ------------------------------------------------
def test_builtin_names_and_local_folders_unchanged(no_network, tiny_model_path, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    builtin = load_model("smollm2-135m-instruct")
    assert "smollm2-135m-instruct" in BUILTIN_MODELS and is_model_folder(builtin)
    assert not Path(builtin).is_relative_to(tmp_path)
    assert load_model(tiny_model_path) == str(Path(tiny_model_path).resolve())
    # a relative folder shaped like a hub id is a local folder: it wins over the hub
    shutil.copytree(tiny_model_path, tmp_path / "org" / "tiny")
    monkeypatch.chdir(tmp_path)
    assert load_model("org/tiny") == str((tmp_path / "org" / "tiny").resolve())


def test_errors_for_non_models_unchanged(no_network, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    for name in ("no-such-model", "a/b/c", "./missing/dir", "org/", "x--y/z"):
        with pytest.raises(ValueError, match="unknown model"):
            load_model(name)
    with pytest.raises(ValueError, match="not a Hugging Face model folder"):
        load_model(str(tmp_path))


def test_is_hub_id_shape():
    for ok in ("Qwen/Qwen3-8B", "org/tiny", "meta-llama/Llama-3.1-8B-Instruct", "a_b/c.d"):
        assert is_hub_id(ok), ok
    for bad in ("smollm2-135m-instruct", "a/b/c", "/abs/path", "./rel/path", "~/x", "org/", "/name",
                "org--x/y", "org/x..y", "-org/x", "org/x.", "org/" + "x" * 100, "org /x", "org/café", None, 3):
        assert not is_hub_id(bad), bad
