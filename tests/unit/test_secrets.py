"""API keys never reach a file, a log, a repr, an exception or a pickle; they go only over
https or to a loopback host. A canary key given inline is looked for everywhere the config
and the client can be shown, saved, raised or pickled. Only 127.0.0.1 is ever connected to:
the refusals for other hosts happen before any connection (``socket.create_connection`` is
replaced by a tripwire in those tests)."""

import json
import pickle
import socket
import urllib.parse

import pytest
import ray.cloudpickle

from envs.navigation.amap_live import LiveAmap
from envs.openai_client import OpenAIChatClient, Secret, key_may_go_to
from rti_actors.config import RTIConfig
from rti_actors.options import ConfigError
from tests.fake_openai import serve

CANARY = "sk-canary-1234567890"
KEY_ENV = "RTI_TEST_CANARY_KEY"


def _config(endpoint: dict) -> RTIConfig:
    return (RTIConfig().environment("Tau2Telecom-v0", env_config={"user": "endpoint", "user_endpoint": endpoint})
            .policy(engine="hf"))


def _inline(**extra) -> dict:
    return {"base_url": "https://api.example.com/v1", "model": "m", "api_key": CANARY, "api_key_env": KEY_ENV, **extra}


@pytest.fixture
def no_network(monkeypatch):
    def tripwire(address, *args, **kwargs):
        raise AssertionError(f"a connection to {address} was attempted")

    monkeypatch.setattr(socket, "create_connection", tripwire)


# ---- the config -------------------------------------------------------------------------------
def test_an_inline_key_is_shown_and_saved_as_stars(monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)
    cfg = _config(_inline())
    shown = [cfg.to_json(), repr(cfg), str(cfg.to_dict()), repr(cfg["environment"]), str(cfg["environment"])]
    assert all(CANARY not in s for s in shown) and all("***" in s for s in shown)
    saved = json.loads(cfg.to_json())["environment"]["env_config"]["user_endpoint"]
    assert saved["api_key"] == "***" and saved["api_key_env"] == KEY_ENV
    # the config keeps the key for this process: a copy (what Algorithm holds) still has it
    copied = cfg.copy()
    assert copied == cfg and copied["environment"]["env_config"]["user_endpoint"]["api_key"].reveal() == CANARY


def test_an_inline_key_is_refused_before_it_could_be_pickled_to_the_env_runners(monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)
    cfg = _config(_inline())
    with pytest.raises(ConfigError) as e:
        cfg.validate(available_cpus=8)
    assert CANARY not in str(e.value) and "environment(env_config['user_endpoint']['api_key']=***)" in str(e.value)
    assert KEY_ENV in str(e.value)
    for dumps in (pickle.dumps, ray.cloudpickle.dumps):
        with pytest.raises(TypeError) as p:
            dumps(cfg)
        assert CANARY not in str(p.value) and KEY_ENV in str(p.value)


def test_a_restored_config_reads_the_key_from_api_key_env(monkeypatch, no_network):
    restored = RTIConfig.from_dict(json.loads(_config(_inline()).to_json()))
    endpoint = restored["environment"]["env_config"]["user_endpoint"]
    monkeypatch.delenv(KEY_ENV, raising=False)
    with pytest.raises(ConfigError, match=rf"left out of a saved config: set the environment variable '{KEY_ENV}'"):
        restored.validate(available_cpus=8)
    with pytest.raises(ValueError, match=rf"set the environment variable '{KEY_ENV}'"):
        OpenAIChatClient(**endpoint)
    monkeypatch.setenv(KEY_ENV, CANARY)
    restored.validate(available_cpus=8)
    client = OpenAIChatClient(**endpoint)
    assert client._key() == CANARY and CANARY not in repr(client)


def test_config_refuses_a_key_over_plain_http_to_another_host(monkeypatch):
    monkeypatch.setenv(KEY_ENV, CANARY)
    remote = {"base_url": "http://10.1.2.3:8000/v1", "model": "m", "api_key_env": KEY_ENV}
    with pytest.raises(ConfigError, match="not https and not a loopback host") as e:
        _config(remote).validate(available_cpus=8)
    assert CANARY not in str(e.value)
    _config({**remote, "allow_insecure_key": True}).validate(available_cpus=8)
    _config({**remote, "base_url": "http://127.0.0.1:8000/v1"}).validate(available_cpus=8)
    _config({**remote, "api_key_env": None}).validate(available_cpus=8)  # no key, nothing to protect
    with pytest.raises(ConfigError, match="allow_insecure_key' True or False"):
        _config({**remote, "allow_insecure_key": "yes"}).validate(available_cpus=8)
    rti = RTIConfig().environment("Navigation-v0").policy(engine="hf").training(algorithm="rti")
    monkeypatch.setenv("RTI_ROLE_API_KEY", CANARY)
    with pytest.raises(ConfigError, match=r"interventions\(roles='http://10.1.2.3:8000/v1'\) is not https") as e:
        rti.copy().interventions(roles="http://10.1.2.3:8000/v1").validate(available_cpus=8)
    assert CANARY not in str(e.value)
    rti.copy().interventions(roles="https://10.1.2.3/v1").validate(available_cpus=8)
    monkeypatch.delenv("RTI_ROLE_API_KEY")
    rti.copy().interventions(roles="http://10.1.2.3:8000/v1").validate(available_cpus=8)


# ---- the client ------------------------------------------------------------------------------
def test_a_client_with_an_inline_key_refuses_to_be_pickled():
    client = OpenAIChatClient("https://api.example.com/v1", "m", api_key=CANARY, api_key_env=KEY_ENV)
    assert CANARY not in repr(client) and CANARY not in str(client)
    for dumps in (pickle.dumps, ray.cloudpickle.dumps):
        with pytest.raises(TypeError, match=f"environment variable '{KEY_ENV}'") as e:
            dumps(client)
        assert CANARY not in str(e.value)
    with pytest.raises(TypeError):
        pickle.dumps(Secret(CANARY, KEY_ENV))


def test_a_client_with_a_key_from_the_environment_pickles_without_it(monkeypatch):
    monkeypatch.setenv(KEY_ENV, CANARY)
    client = OpenAIChatClient("https://api.example.com/v1", "m", api_key_env=KEY_ENV)
    for dumps, loads in ((pickle.dumps, pickle.loads), (ray.cloudpickle.dumps, ray.cloudpickle.loads)):
        blob = dumps(client)
        assert CANARY.encode() not in blob
        assert loads(blob)._key() == CANARY  # read again from this process's environment
    monkeypatch.delenv(KEY_ENV)
    with pytest.raises(ValueError, match=f"{KEY_ENV}'?, which is not set in this process") as e:
        pickle.loads(pickle.dumps(client))
    assert CANARY not in str(e.value)


@pytest.mark.parametrize("url", ["http://10.1.2.3:8000/v1", "http://api.example.com/v1", "http://127.evil.com/v1",
                                 "http://localhost.example.com/v1", "ftp://10.1.2.3/v1"])
def test_a_key_is_never_sent_over_plain_http_to_another_host(url, monkeypatch, no_network):
    with pytest.raises(ValueError, match="not https and not a loopback host.*allow_insecure_key=True") as e:
        OpenAIChatClient(url, "m", api_key=CANARY)
    assert CANARY not in str(e.value)
    monkeypatch.setenv(KEY_ENV, CANARY)
    with pytest.raises(ValueError, match="not https"):
        OpenAIChatClient(url, "m", api_key_env=KEY_ENV)
    OpenAIChatClient(url, "m", api_key=CANARY, allow_insecure_key=True)  # the explicit opt-in
    OpenAIChatClient(url, "m", api_key_env=None)  # no key: plain http is fine


@pytest.mark.parametrize("url", ["http://127.0.0.1:8000/v1", "http://127.8.9.10/v1", "http://[::1]:8000/v1",
                                 "http://localhost:8000/v1", "https://api.example.com/v1"])
def test_loopback_and_https_may_carry_a_key(url):
    assert key_may_go_to(url)
    OpenAIChatClient(url, "m", api_key=CANARY)


def test_errors_and_redirects_never_carry_the_key():
    def denied(path, headers, body):  # a server that echoes the request headers in its error page
        return 401, f"denied: {headers.get('Authorization')}"

    def moved(path, headers, body):
        return 302, b"", {"Location": echo.url + "/elsewhere"}

    with serve(denied) as echo, serve(moved) as redirect:
        with pytest.raises(RuntimeError, match="HTTP 401") as e:
            OpenAIChatClient(echo.base_url, "m", api_key=CANARY)("hi")
        assert CANARY not in str(e.value) and "***" in str(e.value)
        echo.seen.clear()
        with pytest.raises(RuntimeError, match="HTTP 302") as e:
            OpenAIChatClient(redirect.base_url, "m", api_key=CANARY)("hi")
        assert CANARY not in str(e.value)
        assert [headers.get("Authorization") for _, headers, _ in redirect.seen] == [f"Bearer {CANARY}"]
        assert echo.seen == []  # not resent to the target


# ---- the Amap key scrubber -----------------------------------------------------------------------
@pytest.mark.parametrize("key", ["plain0123456789", "a/b+c d=e&f", "k/with/slashes", "k+plus+signs", "k with spaces",
                                 "ключ/ü+é"])
def test_amap_scrubs_every_encoding_of_its_key(key):
    amap = LiveAmap("http://127.0.0.1:9", api_key=key)
    forms = {key, urllib.parse.quote(key), urllib.parse.quote(key, safe=""), urllib.parse.quote_plus(key),
             urllib.parse.urlencode({"key": key}).split("=", 1)[1], json.dumps(key)[1:-1],
             json.dumps(key, ensure_ascii=False)[1:-1]}
    for form in forms:
        scrubbed = amap._scrub(f"GET /v3/place/text?city=x&key={form}&page=1 failed")
        assert form not in scrubbed and "<redacted>" in scrubbed and "&page=1 failed" in scrubbed
    assert key not in repr(amap)
