"""The live Amap backend, against a local HTTP server on 127.0.0.1 that speaks the Amap web
API's documented format (no network, no real key). The server answers from the same
generated world as the offline backend, so a full oracle episode runs over real HTTP. Also:
task files (annotated trips, the way to evaluate on real places)."""

import json
import pickle
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import pytest

from envs.navigation import NavigationEnv, OracleAgent, run_episode
from envs.navigation.amap_offline import OfflineAmap
from envs.navigation.task_file import dump_tasks
from envs.navigation.tasks import build_benchmark
from envs.tool_calls import format_tool_call

KEY = "test-key-5f3a9c"
DOCUMENTED_PATHS = {"/v3/place/text", "/v3/place/around", "/v3/direction/driving", "/v3/direction/walking",
                    "/v4/direction/bicycling", "/v5/direction/electrobike", "/v3/direction/transit/integrated",
                    "/v3/weather/weatherInfo", "/v3/geocode/regeo"}

# A keyword search answer written the way Amap's documentation shows it: string numbers, and
# [] for every empty field.
DOCUMENTED_PLACE_TEXT = {
    "status": "1", "count": "1", "info": "OK", "infocode": "10000",
    "suggestion": {"keywords": [], "cities": []},
    "pois": [{"parent": [], "address": "阜通东大街6号", "distance": [], "pname": "北京市", "importance": [],
              "biz_ext": {"cost": [], "rating": "4.5", "meal_ordering": "0"}, "biz_type": [], "cityname": "北京市",
              "type": "商务住宅;楼宇;商务写字楼", "photos": [], "typecode": "120201", "shopinfo": "0", "poiweight": [],
              "childtype": [], "adname": "朝阳区", "name": "方恒国际中心A座", "location": "116.480983,39.989628",
              "tel": [], "shopid": [], "id": "B000A7BD6C"}],
}


class _AmapHandler(BaseHTTPRequestHandler):
    def do_GET(self):
        url = urlparse(self.path)
        params = {k: v[0] for k, v in parse_qs(url.query).items()}
        server = self.server
        server.seen.append((url.path, params))
        if server.mode == "http500":
            self.send_error(500)
            return
        if server.mode == "garbage":
            body = b"<html>busy</html>"
        elif params.get("key") != KEY:
            body = json.dumps({"status": "0", "info": "INVALID_USER_KEY", "infocode": "10001"}).encode()
        elif params.get("keywords") == "方恒国际中心A座":
            body = json.dumps(DOCUMENTED_PLACE_TEXT, ensure_ascii=False).encode()
        else:
            body = json.dumps(server.amap.request(url.path, params), ensure_ascii=False).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json;charset=UTF-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):  # keep the test output quiet
        pass


@pytest.fixture(scope="module")
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _AmapHandler)
    httpd.amap = OfflineAmap(build_benchmark(0).world)
    httpd.seen, httpd.mode = [], "ok"
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def live_env(server, monkeypatch):
    monkeypatch.setenv("AMAP_MAPS_API_KEY", KEY)
    server.seen.clear()
    server.mode = "ok"
    host, port = server.server_address
    return NavigationEnv({"split": "test", "backend": "live", "amap_base_url": f"http://{host}:{port}",
                          "amap_timeout_s": 5})


def _no_key_anywhere(env):
    everything = json.dumps([env.messages, env.config, env.actions], ensure_ascii=False) + repr(env.client)
    assert KEY not in everything


def test_live_backend_requires_the_key_from_the_environment(monkeypatch):
    monkeypatch.delenv("AMAP_MAPS_API_KEY", raising=False)
    with pytest.raises(ValueError, match="AMAP_MAPS_API_KEY"):
        NavigationEnv({"backend": "live"})


def test_oracle_episode_over_http_earns_the_reward(live_env, server):
    for task_id in ("nav-test-0000", "nav-test-0077"):
        reward, info, _ = run_episode(live_env, OracleAgent, task_id)
        assert reward == 1.0, info.get("reward_breakdown")
        _no_key_anywhere(live_env)
    paths = {path for path, _ in server.seen}
    assert {"/v3/place/text", "/v3/direction/driving"} <= paths <= DOCUMENTED_PATHS
    assert all(params["key"] == KEY for _, params in server.seen)
    driving = [params for path, params in server.seen if path == "/v3/direction/driving"][-1]
    assert driving["waypoints"].count(";") >= 2 and "," in driving["origin"]
    with pytest.raises(TypeError, match="never pickled"):
        pickle.dumps(live_env.client)


def test_every_tool_and_mode_goes_over_http(live_env, server):
    live_env.reset(options={"task_id": "nav-test-0003"})
    ev = live_env.reward_evidence()
    a, b = ev["origin"]["location"], ev["destination"]["location"]
    calls = [("around_search", {"location": a, "radius": 2000}), ("weather", {"city": ev["city"]})]
    calls += [("direction", {"origin": a, "destination": b, "mode": m})
              for m in ("walking", "bicycling", "electrobike", "transit")]
    for name, args in calls:
        obs, *_ = live_env.step(format_tool_call(name, args))
        assert not obs[0]["content"].startswith("Error"), (name, args, obs[0]["content"])
        assert json.loads(obs[0]["content"])
    paths = [path for path, _ in server.seen]
    for path in ("/v3/place/around", "/v3/weather/weatherInfo", "/v3/direction/walking", "/v4/direction/bicycling",
                 "/v5/direction/electrobike", "/v3/geocode/regeo", "/v3/direction/transit/integrated"):
        assert path in paths
    transit = next(params for path, params in server.seen if path == "/v3/direction/transit/integrated")
    assert transit["city"] and transit["cityd"]  # resolved by reverse geocoding first


def test_documented_response_format_is_read(live_env):
    live_env.reset(options={"task_id": "nav-test-0000"})
    obs, *_ = live_env.step(format_tool_call("poi_search", {"address": "方恒国际中心A座", "region": "北京"}))
    poi = json.loads(obs[0]["content"])["pois"][0]
    assert poi["name"] == "方恒国际中心A座" and poi["location"] == "116.480983,39.989628"
    assert poi["tel"] == "" and poi["business"] == {"rating": "4.5", "cost": "", "opentime": ""}
    assert poi["cityname"] == "北京市" and poi["adname"] == "朝阳区"


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("setup,needle", [
    ("wrong_key", "INVALID_USER_KEY"),
    ("http500", "HTTP 500"),
    ("garbage", "not JSON"),
    ("unreachable", "unreachable"),
    ("bad_url", "unreachable"),
])
def test_service_failures_are_error_observations_without_the_key(live_env, server, monkeypatch, setup, needle):
    if setup == "wrong_key":
        monkeypatch.setenv("AMAP_MAPS_API_KEY", "another-key")
        live_env = NavigationEnv({**live_env.config})
    elif setup in ("http500", "garbage"):
        server.mode = setup
    elif setup == "unreachable":
        live_env = NavigationEnv({**live_env.config, "amap_base_url": f"http://127.0.0.1:{_free_port()}"})
    else:  # urllib rejects this URL with a ValueError that quotes the whole URL, key included
        live_env = NavigationEnv({**live_env.config, "amap_base_url": "notaurl"})
    live_env.reset(options={"task_id": "nav-test-0000"})
    obs, reward, terminated, _, _ = live_env.step(format_tool_call("poi_search", {"address": "人民公园"}))
    assert obs[0]["content"].startswith("Error") and needle in obs[0]["content"], obs
    assert not terminated and reward == 0.0
    for key in (KEY, "another-key"):
        assert key not in json.dumps(live_env.messages, ensure_ascii=False)


# ---- task files: annotated trips for live evaluation ------------------------------------------
@pytest.fixture(scope="module")
def task_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("nav") / "tasks.jsonl"
    dump_tasks(build_benchmark(0), path)
    return path


def test_dumped_tasks_load_back_with_the_same_gold_and_words(task_file):
    generated = NavigationEnv({"split": "test", "language": "en"})
    loaded = NavigationEnv({"split": "test", "language": "en", "tasks_file": str(task_file)})
    assert loaded.task_ids("test") == generated.task_ids("test") and len(loaded.task_ids("train")) == 600
    for task_id in ("nav-test-0000", "nav-test-0149"):
        obs_a, _ = generated.reset(options={"task_id": task_id})
        obs_b, _ = loaded.reset(options={"task_id": task_id})
        assert obs_a == obs_b
        a, b = generated.reward_evidence(), loaded.reward_evidence()
        assert a["waypoints"] == b["waypoints"] and a["allowed_orders"] == b["allowed_orders"]
        assert run_episode(loaded, OracleAgent, task_id)[0] == 1.0


def test_live_backend_with_a_task_file_over_http(task_file, server, monkeypatch):
    monkeypatch.setenv("AMAP_MAPS_API_KEY", KEY)
    host, port = server.server_address
    env = NavigationEnv({"split": "test", "backend": "live", "amap_base_url": f"http://{host}:{port}",
                         "tasks_file": str(task_file)})
    assert run_episode(env, OracleAgent, "nav-test-0010")[0] == 1.0


@pytest.mark.parametrize("edit,needle", [
    (lambda row: row.update(level=7), "level must be one of"),
    (lambda row: row.update(groups=[[0, 1]]), "must split the waypoint indices"),
    (lambda row: row["origin"].update(location="22.5,114.0"), "longitude comes first"),
    (lambda row: row.update(request={"fr": "bonjour"}), "request must map languages"),
    (lambda row: row.pop("destination"), "missing field 'destination'"),
])
def test_malformed_task_files_name_the_line_and_the_problem(task_file, tmp_path, edit, needle):
    rows = [json.loads(line) for line in task_file.read_text(encoding="utf-8").splitlines()[:3]]
    edit(rows[1])
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows), encoding="utf-8")
    with pytest.raises(ValueError, match=f"bad.jsonl, line 2: .*{needle}"):
        NavigationEnv({"split": "test", "tasks_file": str(bad)})
