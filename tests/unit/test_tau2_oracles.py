"""The verification oracles of the τ² specification, over every shipped task.

Airline and retail: every gold action replays on a fresh DB with exactly the specified
errors, and the gold-state fingerprint of every task matches upstream's. Telecom: after
initialisation the assertions fail (hold, for the transfer tasks); after the gold actions
they all hold, no gold action errs, and the phone/CRM fingerprints match.
Needs the paper-era data (``tau2_testdata``: ../shared, else the library's cache).
"""

import pytest

from envs.tau2.data import Tau2Data
from envs.tau2.domains import build_environment
from envs.tau2.evaluator import evaluate, gold_fingerprints
from tests.unit.tau2_testdata import DATA_DIR, needs_data, telecom_base_tasks

pytestmark = needs_data

A0, R0 = "124e39a664b5", "b25c9cb211f5"  # initial airline / retail fingerprints
T0_AGENT, T0_USER = "304cf5ef0598", "e1f3a8637388"

# Gold-state fingerprints per task id.
AIRLINE_GOLD = [
    A0, A0, "d9e9d254b5ca", A0, A0, A0, A0, "7bc5a4fa21c5",
    "00766aa3e034", "7eedd0698349", A0, "1e46d540ec2e", "df1e46c5aaf8", A0, "b4ea8effd45e", "c9500f310090",
    "c9500f310090", "37ea6df3bdb7", "361a067372a4", "e5defef608c9", "a561da60bcd2", "9ede9d0dc436", "37ea6df3bdb7", "7536455e0ca5",
    "db03cad58150", "d0579b8ae59e", A0, "91d3895047cd", A0, "9ecc04e81c3d", "dc171787dd84", A0,
    "caea57241d7a", "95b5a97e2197", A0, "9adec732713f", A0, "2c62f7389ce2", "d9e9d254b5ca", "964c9e1c81f8",
    "96b61d516184", A0, "768a1bf6bced", A0, "a1b4b3c043c5", A0, A0, A0,
    A0, A0,
]
RETAIL_GOLD = [
    "a109be174767", "eab1dde2ca84", "9b66e83dbc00", "efb8b638945f", "f333ec4241d5", "9f1e45fc84a6", "2053905d31cc", "4759f292bd76",
    "b9f3a1f4d12b", "c0bf2b8ebfe4", R0, "05695f333e6a", R0, "21462ba8f4c9", "6351938a2a69", "fe6b690f4810",
    "76488acd2c5a", "582f5d9c8242", "31df0f86dbf9", "ef45b3de7b49", "d43fdfd87998", "079ef03ab35d", "dc23fc9e7832", "077542b3b671",
    R0, R0, "232e66188bb8", "08a9f35dd8ee", "977b187e0993", "d2d7dc99ebac", "e714c87d9835", "62c4403fbd95",
    "aef31f614f8b", "5fe996d49aef", "bac92290376c", "4f518424174e", "c263b7ca5913", "c263b7ca5913", "e5c0722a1e6b", "6cecf269871e",
    "09f9be39b93d", "c3bd28c10157", "c3bd28c10157", "a533bdac3eb6", "7261dbb2b5fe", "4c50624bd45b", "9443e4a3f302", "3e78643a7715",
    "f97ba40e5b91", "57802d7b797e", R0, "5198da6a906f", "0a993bd7f702", "75f2e3a64f60", "ce6253776349", "b8dc464a3c0c",
    "aa54036bba8d", R0, "381a3546df6c", "8cf194e4eca8", "c64074b669a7", "c4714fc4f113", R0, "26acf77e3aeb",
    "2e9d92ee0d0c", R0, "a60e11827d3f", R0, R0, "847ac0da2e85", "d8d9d176cae3", "c14be7c97f71",
    "c14be7c97f71", "3fda1284264c", "49e0a1364ae7", "4715bef725f0", "790091ad9136", "6b264a9871c7", "4ceb2d12183f", "08eab1c97f1c",
    "2eb374bb67d5", "3e6cf2f5d544", "7ecde7bd7664", "6d6c5796be53", "6d6c5796be53", "e60e8a961176", "4d145d54e2a0", "facad1bdef80",
    "3ac42fbf475e", "e6d35273c62b", "c01984ba9743", "138cc87a1384", "034b3692aa70", "0c80a65bf8cd", "b43bfc63042a", "a0d1b0eab2e1",
    "a99755655767", "a99755655767", "a38fddcc78eb", "0d4c506b6ae1", "1af6e2cc79b3", "ecb59101f10d", "0089a38140d5", "da721a24a789",
    "86fb873c6582", R0, "2d308b3a2193", "5eb70a54dd4d", "7db01a0501bb", "b7a36959054a", "f45606e4dad4", "1301e5413c38",
    "6eb2be1662a3", "4337c9b25955",
]
# (task id, action index) -> error of the gold actions that must fail.
RETAIL_GOLD_ERRORS = {
    ("2", 1): "Product not found", ("3", 1): "Product not found", ("4", 1): "Product not found",
    ("12", 4): "Payment method should be the original payment method",
    ("13", 4): "Payment method should be the original payment method",
    ("21", 5): "Product not found", ("21", 6): "Product not found", ("21", 8): "Product not found",
    **{(t, 0): "User not found" for t in ("35", "37", "38", "54", "55", "39", "68")},
    ("67", 0): "User not found", ("67", 1): "User not found",
    ("46", 1): "Order not found", ("46", 2): "Order not found",
    ("47", 1): "Order not found", ("47", 2): "Order not found",
    ("64", 6): "Non-delivered order cannot be exchanged",
    ("105", 0): "Insufficient gift card balance to pay for the price difference",
}

# By position in the shipped tasks.json.
TELECOM_FINGERPRINTS = """
9a9ae341ec9a 0246e41b8012 304cf5ef0598
ffb35a8dc7f4 65e1838b2dc6 304cf5ef0598
1c3d7e40b220 65e1838b2dc6 304cf5ef0598
131d03019449 0246e41b8012 304cf5ef0598
123d6982e535 0246e41b8012 304cf5ef0598
276fb4fc5313 0246e41b8012 ed58804f463f
3773e3fa9c70 65e1838b2dc6 ed58804f463f
6747a5c6d129 4946e7b208fe ed58804f463f
6b78b98e0147 0246e41b8012 304cf5ef0598
fd8aa36d31f2 0246e41b8012 304cf5ef0598
f2a340150d1c 0246e41b8012 304cf5ef0598
4a5a7585fc4a 0246e41b8012 304cf5ef0598
f1d73d3c5733 0246e41b8012 304cf5ef0598
0ca4fa47957d 0246e41b8012 ed58804f463f
3c80747ae302 0246e41b8012 304cf5ef0598
d11fd09383c1 65e1838b2dc6 ed58804f463f
23d0f4a60b1c 0246e41b8012 304cf5ef0598
4c63a1e4b71f 0246e41b8012 ed58804f463f
b77ea0bcc71d 65e1838b2dc6 304cf5ef0598
fe41d4a0b665 0246e41b8012 ed58804f463f
7566f634f1b4 0246e41b8012 ed58804f463f
7f949a88eacd 65e1838b2dc6 304cf5ef0598
f45858803bfa 0246e41b8012 ed58804f463f
6aa1a52aeff2 0246e41b8012 ed58804f463f
98c5d03308c5 0246e41b8012 304cf5ef0598
d5c289dca85b 0246e41b8012 ed58804f463f
a536662ca46b 0246e41b8012 ed58804f463f
5e508a7ac95b 0246e41b8012 ed58804f463f
29dfdf2e0c33 0246e41b8012 ed58804f463f
187dc1493a4e 0246e41b8012 ed58804f463f
f4a4667daa8d 0246e41b8012 ed58804f463f
af2b5bd4f337 0246e41b8012 304cf5ef0598
366cae432ca4 0246e41b8012 ed58804f463f
85b277bf736c 0246e41b8012 ed58804f463f
22d13de139a0 0246e41b8012 ed58804f463f
80ee68d50afb 0246e41b8012 ed58804f463f
ddd8956b1cc1 65e1838b2dc6 304cf5ef0598
3d53a03b9db2 3d53a03b9db2 304cf5ef0598
25a2475df731 65e1838b2dc6 304cf5ef0598
be0b66d985fb 65e1838b2dc6 5a12d77ca0d6
cecffb1caabf 65e1838b2dc6 5a12d77ca0d6
cecffb1caabf cecffb1caabf 742995a3e358
04a94b3bd9d7 04a94b3bd9d7 304cf5ef0598
6266560065e1 6266560065e1 aad6f2f4527d
6266560065e1 6266560065e1 742995a3e358
8ea34dd2f487 8ea34dd2f487 304cf5ef0598
2c3efc02be27 65e1838b2dc6 304cf5ef0598
bf1c1825ca6a 65e1838b2dc6 5a12d77ca0d6
d02e4465bb04 d02e4465bb04 304cf5ef0598
e609ecdd01a7 e609ecdd01a7 aad6f2f4527d
57939e39c2eb 65e1838b2dc6 5a12d77ca0d6
e1f645844485 65e1838b2dc6 5a12d77ca0d6
71ecc154da2a 71ecc154da2a aad6f2f4527d
71ecc154da2a 71ecc154da2a 742995a3e358
dc96d4c98115 dc96d4c98115 304cf5ef0598
f635626f0fb5 f635626f0fb5 aad6f2f4527d
f635626f0fb5 f635626f0fb5 742995a3e358
1bae805b3299 65e1838b2dc6 5a12d77ca0d6
1bae805b3299 1bae805b3299 742995a3e358
6a5f55a8b54f 6a5f55a8b54f aad6f2f4527d
6a5f55a8b54f 6a5f55a8b54f 742995a3e358
8077f70614c6 8077f70614c6 aad6f2f4527d
8077f70614c6 8077f70614c6 742995a3e358
e506f2300865 e506f2300865 aad6f2f4527d
e506f2300865 e506f2300865 742995a3e358
8bae9bdf4855 65e1838b2dc6 304cf5ef0598
dd39fa5af1d8 65e1838b2dc6 304cf5ef0598
e9d7cde3d4e3 4946e7b208fe ed58804f463f
e336af3bf5fe 4946e7b208fe ed58804f463f
5e5f7e73279f 0246e41b8012 304cf5ef0598
f032facf9533 0246e41b8012 304cf5ef0598
f13118adc9eb 0246e41b8012 304cf5ef0598
8bb952123390 65e1838b2dc6 304cf5ef0598
aec1b65c46df 65e1838b2dc6 ed58804f463f
9ae6c49e1780 0878c8c7cec4 304cf5ef0598
3c9f3decacf1 0246e41b8012 304cf5ef0598
e2d42feaaed6 0246e41b8012 304cf5ef0598
80484d2c6bbe 146a1a4ea300 ed58804f463f
85fdaea9ff12 0246e41b8012 304cf5ef0598
b8b7ed3627cb 0246e41b8012 304cf5ef0598
a61f1dc0f57d 0246e41b8012 ed58804f463f
4d00c30f2a02 0246e41b8012 304cf5ef0598
65b6134ba903 0246e41b8012 ed58804f463f
34a4f50aefe2 65e1838b2dc6 ed58804f463f
f69e889af23e 65e1838b2dc6 304cf5ef0598
479f9cfc9857 0878c8c7cec4 304cf5ef0598
c795d36aeae3 0246e41b8012 ed58804f463f
e652429cba09 146a1a4ea300 ed58804f463f
a95d2da92c77 146a1a4ea300 304cf5ef0598
b78ae7c1c3f9 0246e41b8012 304cf5ef0598
76300f5b706a 146a1a4ea300 ed58804f463f
4bfee7f0895b 0246e41b8012 ed58804f463f
0e1d75b1a9d2 0878c8c7cec4 ed58804f463f
4d833284d755 0246e41b8012 304cf5ef0598
96c4a49d60d4 0878c8c7cec4 ed58804f463f
ee0f78d7da9d 0246e41b8012 ed58804f463f
3e913b285090 0878c8c7cec4 304cf5ef0598
3c39f420fac9 0878c8c7cec4 ed58804f463f
873a8ef1c244 0878c8c7cec4 ed58804f463f
892a1ff371d9 0878c8c7cec4 ed58804f463f
a5e66a6318bf 0878c8c7cec4 304cf5ef0598
9a6fa1375c6d 0246e41b8012 ed58804f463f
d1636edae400 0878c8c7cec4 ed58804f463f
ad21d3a4bf95 146a1a4ea300 ed58804f463f
1f2603780a3d 0878c8c7cec4 ed58804f463f
49845de2335b 0878c8c7cec4 ed58804f463f
2b0859fea3ca 146a1a4ea300 ed58804f463f
b60c9ae75859 0878c8c7cec4 ed58804f463f
c613b24eba21 0878c8c7cec4 ed58804f463f
e28c038651fd 0878c8c7cec4 ed58804f463f
790ffe625351 0878c8c7cec4 ed58804f463f
eca1c534ad9e 0878c8c7cec4 ed58804f463f
d89587043343 0878c8c7cec4 ed58804f463f
58f2a2af186f 0878c8c7cec4 ed58804f463f
""".split("\n")[1:-1]  # user after init, user after gold, agent after gold


@pytest.fixture(scope="module")
def data():
    return Tau2Data(DATA_DIR)


def test_task_files_and_splits(data):
    sizes = {"airline": (50, 30, 20), "retail": (114, 74, 40), "telecom": (114, 74, 40)}
    for domain, (base, train, test) in sizes.items():
        assert [len(data.split_ids(domain, s)) for s in ("base", "train", "test")] == [base, train, test]
        assert set(data.split_ids(domain, "train")) | set(data.split_ids(domain, "test")) == set(data.split_ids(domain, "base"))
        assert not set(data.split_ids(domain, "train")) & set(data.split_ids(domain, "test"))
    assert len(data.split_ids("telecom", "small")) == 20
    assert len(telecom_base_tasks(data)) == 114


def test_initial_fingerprints(data):
    assert build_environment(data, "airline").fingerprints() == (A0, None)
    assert build_environment(data, "retail").fingerprints() == (R0, None)
    assert build_environment(data, "telecom").fingerprints() == (T0_AGENT, T0_USER)


def gold_trajectory(data: Tau2Data, domain: str, task: dict):
    """The gold actions as agent/user tool calls, run on a live env, plus
    (airline/retail) one agent message stating every communicate_info string."""
    env = build_environment(data, domain)
    env.initialise(task)
    trajectory = [{"role": "assistant", "content": "Hi! How can I help you today?", "tool_calls": []}]
    criteria = task["evaluation_criteria"]
    for action in criteria["actions"]:
        requestor = action.get("requestor") or "assistant"
        call = {"id": action["action_id"], "name": action["name"], "arguments": action["arguments"],
                "requestor": requestor}
        trajectory.append({"role": requestor, "content": None, "tool_calls": [call]})
        trajectory.append(env.execute(call, requestor))
    if criteria.get("communicate_info"):
        trajectory.append({"role": "assistant", "content": " ".join(criteria["communicate_info"]), "tool_calls": []})
    return env, trajectory


@pytest.mark.parametrize("domain,golden", [("airline", AIRLINE_GOLD), ("retail", RETAIL_GOLD)])
def test_gold_replay_fingerprints_errors_and_self_consistency(data, domain, golden):
    tasks = data.tasks(domain)
    assert sorted(tasks, key=int) == [str(i) for i in range(len(golden))]
    errors, mismatched, unrewarded = {}, [], []
    for task_id, task in tasks.items():
        env, trajectory = gold_trajectory(data, domain, task)
        for i, message in enumerate(m for m in trajectory if m["role"] == "tool"):
            if message["error"]:
                errors[(task_id, i)] = message["content"].removeprefix("Error: ")
        # The evaluator's gold state (fresh env + gold actions, no sync, failures skipped)
        # must have upstream's fingerprint and equal this replay (reward 1 needs DB equality).
        if gold_fingerprints(data, domain, task_id)[0] != golden[int(task_id)]:
            mismatched.append(task_id)
        if evaluate(data, domain, task, trajectory, "user_stop", env)[0] != 1.0:
            unrewarded.append(task_id)
        assert evaluate(data, domain, task, trajectory, "max_steps", env)[0] == 0.0
    assert mismatched == [] and unrewarded == []
    assert errors == ({} if domain == "airline" else RETAIL_GOLD_ERRORS)


def test_telecom_assertions_fail_after_init_and_hold_after_gold(data):
    tasks = telecom_base_tasks(data)
    assert len(tasks) == len(TELECOM_FINGERPRINTS) == 114
    problems = []
    for index, task in enumerate(tasks):
        criteria = task["evaluation_criteria"]
        env = build_environment(data, "telecom")
        env.initialise(task)

        def holds():
            return [env.run_function(a["env_type"], a["func_name"], a["arguments"]) == a["assert_value"]
                    for a in criteria["env_assertions"]]

        user_after_init = env.fingerprints()[1]
        before = holds()
        transfer = criteria["reward_basis"] == ["ENV_ASSERTION", "ACTION"]
        errors = [env.execute({"id": "g", "name": a["name"], "arguments": a["arguments"]}, a["requestor"])
                  for a in criteria["actions"]]
        errors = [m["content"] for m in errors if m["error"]]
        agent_fp, user_fp = env.fingerprints()
        after = holds()
        if (all(before) != transfer or not all(after) or errors
                or f"{user_after_init} {user_fp} {agent_fp}" != TELECOM_FINGERPRINTS[index]):
            problems.append((index, task["id"], before, after, errors))
        _, trajectory = gold_trajectory(data, "telecom", task)  # self-consistency
        if evaluate(data, "telecom", task, trajectory, "user_stop", _)[0] != 1.0:
            problems.append((index, task["id"], "gold trajectory not rewarded"))
    assert problems == []


def test_telecom_small_split_oracle(data):
    for task_id in data.split_ids("telecom", "small"):
        task = data.tasks("telecom")[task_id]
        env, trajectory = gold_trajectory(data, "telecom", task)
        assert not any(m.get("error") for m in trajectory)
        assert evaluate(data, "telecom", task, trajectory, "user_stop", env)[0] == 1.0
