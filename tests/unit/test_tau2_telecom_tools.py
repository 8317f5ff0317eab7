"""Telecom: CRM tool error branches, the phone's tools and physics, and the DB->phone sync."""

import json

import pytest

from envs.tau2.data import Tau2Data
from envs.tau2.domains import build_environment
from tests.unit.tau2_testdata import DATA_DIR, needs_data

pytestmark = needs_data

GOOD_BAR = "📶³ Good | 5G | 📱 Data Enabled | 🔋 80%"
EXCELLENT_BAR = "📶⁴ Excellent | 5G | 📱 Data Enabled | 🔋 80%"
DEAD_BAR = "📵 No Signal | 📵 Data Disabled | 🔋 80%"


@pytest.fixture
def env():
    return build_environment(Tau2Data(DATA_DIR), "telecom")


@pytest.fixture
def phone(env):
    """The environment with the task customer's phone registered (sync active)."""
    env.run_function("user", "set_user_info", {"name": "John Smith", "phone_number": "555-123-2002"})
    return env


def agent(env, name, **arguments):
    msg = env.execute({"id": "a", "name": name, "arguments": arguments}, "assistant")
    return msg["content"], msg["error"]


def user(env, name, **arguments):
    msg = env.execute({"id": "u", "name": name, "arguments": arguments}, "user")
    assert not msg["error"], msg["content"]
    return msg["content"]


def fails(env, name, needle, **arguments):
    before = env.fingerprints()
    content, error = agent(env, name, **arguments)
    assert error and content.startswith("Error: ") and needle in content, content
    assert env.fingerprints() == before


def line(env, line_id="L1002"):
    return next(ln for ln in env.agent.db["lines"] if ln["line_id"] == line_id)


def bill(env, bill_id):
    return next(b for b in env.agent.db["bills"] if b["bill_id"] == bill_id)


def test_read_tools_and_lookup_errors(env):
    assert json.loads(agent(env, "get_customer_by_phone", phone_number="555-123-2003")[0])["customer_id"] == "C1001"
    fails(env, "get_customer_by_phone", "Customer with phone number 555-000-0000 not found", phone_number="555-000-0000")
    fails(env, "get_customer_by_id", "Customer with ID C9 not found", customer_id="C9")
    assert json.loads(agent(env, "get_customer_by_name", full_name="john SMITH", dob="1985-06-15")[0])[0]["customer_id"] == "C1001"
    assert agent(env, "get_customer_by_name", full_name="John Smith", dob="1985-06-16")[0] == "[]"
    fails(env, "get_details_by_id", "Unknown ID format or type: X1", id="X1")
    fails(env, "get_details_by_id", "Device with ID D9 not found", id="D9")
    assert json.loads(agent(env, "get_details_by_id", id="P1002")[0])["data_refueling_price_per_gb"] == 2.0
    device = json.loads(agent(env, "get_details_by_id", id="D1002")[0])
    assert device["activation_date"] == "2025-02-15 11:45:00"
    bills = json.loads(agent(env, "get_bills_for_customer", customer_id="C1001", limit=2)[0])
    assert [b["bill_id"] for b in bills] == ["B1003", "B1002"]
    assert agent(env, "get_data_usage", customer_id="C1001", line_id="L1002")[0] == (
        '{"line_id": "L1002", "data_used_gb": "8.7", "data_limit_gb": "15.0", "data_refueling_gb": "0.0", '
        '"cycle_end_date": "2025-02-28"}')
    fails(env, "get_data_usage", "Line L1004 not found for customer C1001", customer_id="C1001", line_id="L1004")


def test_suspend_and_resume_line(env):
    fails(env, "suspend_line", "Customer with ID C9 not found", customer_id="C9", line_id="L1002", reason="x")
    fails(env, "suspend_line", "Line L1004 not found for customer C1001", customer_id="C1001", line_id="L1004", reason="x")
    fails(env, "suspend_line", "Line must be active to suspend", customer_id="C1001", line_id="L1003", reason="x")
    out = json.loads(agent(env, "suspend_line", customer_id="C1001", line_id="L1001", reason="travel")[0])
    assert out["message"] == "Line suspended successfully. $5/month holding fee will apply."
    assert out["line"]["status"] == "Suspended" and out["line"]["suspension_start_date"] == "2025-02-25"
    fails(env, "resume_line", "Line must be suspended to resume", customer_id="C1001", line_id="L1002")
    out = json.loads(agent(env, "resume_line", customer_id="C1001", line_id="L1003")[0])
    assert out["message"] == "Line resumed successfully" and out["line"]["suspension_start_date"] is None


def test_send_payment_request(env):
    fails(env, "send_payment_request", "Customer with ID C9 not found", customer_id="C9", bill_id="B1002")
    fails(env, "send_payment_request", "Bill B1004 not found for customer C1001", customer_id="C1001", bill_id="B1004")
    assert agent(env, "send_payment_request", customer_id="C1001", bill_id="B1001") == \
        ("Payment request sent to the customer for bill B1001", False)  # even a paid bill (quirk)
    assert bill(env, "B1001")["status"] == "Awaiting Payment"
    fails(env, "send_payment_request", "A bill is already awaiting payment for this customer",
          customer_id="C1001", bill_id="B1002")


def test_roaming_and_refuel(env):
    assert agent(env, "enable_roaming", customer_id="C1001", line_id="L1002")[0] == "Roaming was already enabled"
    assert agent(env, "disable_roaming", customer_id="C1001", line_id="L1002")[0] == "Roaming disabled successfully"
    assert agent(env, "disable_roaming", customer_id="C1001", line_id="L1002")[0] == "Roaming was already disabled"
    assert agent(env, "enable_roaming", customer_id="C1001", line_id="L1002")[0] == "Roaming enabled successfully"
    fails(env, "enable_roaming", "Line L1009 not found for customer C1001", customer_id="C1001", line_id="L1009")
    fails(env, "refuel_data", "Refuel amount must be positive", customer_id="C1001", line_id="L1002", gb_amount=0)
    fails(env, "refuel_data", "Customer with ID C9 not found", customer_id="C9", line_id="L1002", gb_amount=1)
    out = json.loads(agent(env, "refuel_data", customer_id="C1001", line_id="L1002", gb_amount=2.0)[0])
    assert out == {"message": "Successfully added 2.0 GB of data for line L1002 for $4.00",
                   "new_data_refueling_gb": "2.0", "charge": "4.0"}
    draft = bill(env, "B1003")
    assert draft["total_due"] == 4.0 and draft["line_items"] == [
        {"description": "Data refueling: 2.0 GB at $2.0/GB", "amount": 4.0, "date": "2025-02-25", "item_type": "Charge"}]


def test_refuel_without_a_draft_bill_creates_one_deterministically(env):
    bill(env, "B1003")["status"] = "Issued"
    agent(env, "refuel_data", customer_id="C1001", line_id="L1001", gb_amount=1)
    created = env.agent.db["bills"][-1]
    assert created["bill_id"] == "B00000001" and created["status"] == "Draft" and created["total_due"] == 5.0
    assert (created["period_start"], created["period_end"], created["due_date"]) == ("2025-03-01", "2025-03-31", "2025-03-15")
    assert env.agent.db["customers"][0]["bill_ids"][-1] == "B00000001"


def test_overdue_bill_helper_errors(env):
    call = env.run_function
    with pytest.raises(Exception, match="Line must be active to suspend for unpaid bill"):
        call("assistant", "suspend_line_for_overdue_bill",
             {"customer_id": "C1001", "line_id": "L1003", "new_bill_id": "B9", "contract_ended": False})
    with pytest.raises(Exception, match="Customer already has an overdue bill"):
        call("assistant", "suspend_line_for_overdue_bill",
             {"customer_id": "C1002", "line_id": "L1004", "new_bill_id": "B9", "contract_ended": False})
    assert call("assistant", "suspend_line_for_overdue_bill", {
        "customer_id": "C1001", "line_id": "L1002", "new_bill_id": "B1234321", "contract_ended": True}) == \
        "Line L1002 suspended for unpaid bill B1234321. Contract ended: True"
    assert line(env)["contract_end_date"] == "2025-01-31" and bill(env, "B1234321")["total_due"] == 65.0
    assert call("assistant", "assert_overdue_bill_exists", {"customer_id": "C1001", "overdue_bill_id": "B1234321"})
    with pytest.raises(Exception, match="Overdue bill B1001 is not overdue"):
        call("assistant", "assert_overdue_bill_exists", {"customer_id": "C1001", "overdue_bill_id": "B1001"})


def test_fresh_phone_and_sync(env, phone):
    assert user(env, "check_status_bar") == f"Status Bar: {GOOD_BAR}"
    assert user(env, "run_speed_test") == "Speed Test Result: 220.00 Mbps (Excellent). Connection is very fast."
    around = env.user.db["surroundings"]
    assert (around["roaming_allowed"], around["line_active"], around["mobile_data_usage_exceeded"],
            around["payment_request"]) == (True, True, False, None)
    agent(env, "suspend_line", customer_id="C1001", line_id="L1002", reason="x")
    assert around["line_active"] is False
    assert user(env, "check_status_bar") == f"Status Bar: {GOOD_BAR}"  # no search until a trigger


# (helpers, status bar, speed test, can send MMS, connection status)
PHYSICS = [
    ([("user", "turn_airplane_mode_on", {})], "✈️ Airplane Mode | 🔋 80%", "Speed test failed: No Connection.", False, "no_service"),
    ([("user", "set_network_mode_preference", {"mode": "2g_only"})], "📶¹ Poor | 2G | 📱 Data Enabled | 🔋 80%",
     "0.05 Mbps (Very Poor)", False, "connected"),
    ([("user", "turn_data_saver_mode_on", {})], "📶³ Good | 5G | 📱 Data Enabled | 🔽 Data Saver | 🔋 80%",
     "44.00 Mbps (Good)", True, "connected"),
    ([("user", "break_vpn", {})], "📶³ Good | 5G | 📱 Data Enabled | 🔒 VPN Connected | 🔋 80%", "22.00 Mbps (Fair)", True,
     "connected"),
    ([("user", "set_user_location", {"abroad": True}), ("user", "turn_roaming_off", {})], EXCELLENT_BAR,
     "Speed test failed: No Connection.", False, "connected"),
    ([("assistant", "set_data_usage", {"customer_id": "C1001", "line_id": "L1002", "data_used_gb": 15.1})], GOOD_BAR,
     "Speed test failed: No Connection.", False, "connected"),
    ([("assistant", "suspend_line_for_overdue_bill", {"customer_id": "C1001", "line_id": "L1002",
                                                       "new_bill_id": "B1234321", "contract_ended": False}),
      ("user", "simulate_network_search", {})], DEAD_BAR, "Speed test failed: No Connection.", False, "no_service"),
    ([("user", "lock_sim_card", {"mode": "pin"})], DEAD_BAR, "Speed test failed: No Connection.", False, "no_service"),
    ([("user", "set_wifi_calling", {"enabled": True, "mms_over_wifi": True})], GOOD_BAR, "220.00 Mbps (Excellent)",
     False, "connected"),
]


@pytest.mark.parametrize("helpers,bar,speed,mms,status", PHYSICS)
def test_phone_physics_vectors(env, phone, helpers, bar, speed, mms, status):
    for side, name, args in helpers:
        env.run_function(side, name, args)
    assert user(env, "check_status_bar") == f"Status Bar: {bar}"
    assert speed in user(env, "run_speed_test")
    assert user(env, "can_send_mms") == f"Your messaging app {'can' if mms else 'cannot'} send MMS messages."
    assert env.user.db["device"]["network_connection_status"] == status


def test_overdue_bill_walkthrough(env, phone):
    env.run_function("assistant", "suspend_line_for_overdue_bill", {
        "customer_id": "C1001", "line_id": "L1002", "new_bill_id": "B1234321", "contract_ended": False})
    env.run_function("user", "simulate_network_search", {})
    assert user(env, "check_payment_request") == "No payment request has been made."
    assert user(env, "make_payment") == "You do not have a payment request."
    assert agent(env, "send_payment_request", customer_id="C1001", bill_id="B1234321")[0] == \
        "Payment request sent to the customer for bill B1234321"
    assert user(env, "check_payment_request") == "You have a payment request for bill B1234321 of 65.0 USD."
    assert user(env, "make_payment") == "Payment of 65.0 USD has been made for bill B1234321."
    assert bill(env, "B1234321")["status"] == "Paid" and env.user.db["surroundings"]["payment_request"] is None
    agent(env, "resume_line", customer_id="C1001", line_id="L1002")
    assert user(env, "check_status_bar") == f"Status Bar: {DEAD_BAR}"
    assert user(env, "reboot_device") == f"Restarting network services...\nStatus Bar: {EXCELLENT_BAR}"


def test_user_tool_results(env, phone):
    assert user(env, "set_network_mode_preference", mode="5g").startswith(
        "Failed to set network mode: '5g' is not a valid option. Please use one of: 4g_5g_preferred, 4g_only, 3g_only, 2g_only")
    assert user(env, "grant_app_permission", app_name="camera", permission="sms").startswith(
        "Error. App 'camera' not found. Cannot grant permission.")  # a result, not a tool error
    assert user(env, "grant_app_permission", app_name="messaging", permission="GPS").startswith(
        "Error. Permission 'gps' not tracked for app 'messaging', available permissions: ['sms', 'storage', 'phone', 'network']")
    assert user(env, "check_app_status", app_name="browser") == \
        "Status for App: browser\n - Permissions Granted:\n   - storage\n   - network"
    env.run_function("user", "remove_app_permission", {"app_name": "messaging", "permission": "sms"})
    assert user(env, "check_app_permissions", app_name="messaging") == "App 'messaging' has permission for: storage, phone."
    assert user(env, "can_send_mms") == "Your messaging app cannot send MMS messages."
    assert user(env, "grant_app_permission", app_name="messaging", permission="SMS").startswith("Success.")
    assert user(env, "check_installed_apps") == "The following apps are installed on the phone: messaging, browser"
    assert user(env, "check_network_status").splitlines()[:3] == [
        "Airplane Mode: OFF", "SIM Card Status: active", "Cellular Connection: connected"]
    user(env, "toggle_airplane_mode")
    assert user(env, "toggle_wifi").startswith("Cannot change Wi-Fi settings while Airplane Mode is ON.")
    assert user(env, "check_sim_status") == "Your SIM card is active and working."


def test_apn_settings(env, phone):
    msg = env.execute({"id": "u", "name": "set_apn_settings", "arguments": {"apn_settings": "internet"}}, "user")
    assert msg["error"]  # a non-object is rejected and the phone left intact (spec quirk 15)
    msg = env.execute({"id": "u", "name": "set_apn_settings", "arguments": {"apn_settings": {"apn_name": "5g"}}}, "user")
    assert msg["error"] and "apn_name" in msg["content"]
    env.run_function("user", "break_apn_mms_setting", {})
    assert "MMSC URL (for picture messages): Not Set" in user(env, "check_apn_settings")
    assert user(env, "reset_apn_settings").startswith("APN settings will reset at reboot.")
    assert "Not Set" in user(env, "check_apn_settings")  # only at the next reboot
    assert user(env, "reboot_device").startswith("Resetting APN settings...\nRestarting network services...")
    assert "http://mms.carrier.com/mms/wapenc" in user(env, "check_apn_settings")
    assert user(env, "set_apn_settings", apn_settings={"apn_name": "broken"}) == \
        f"APN settings set to: broken\nStatus Bar: {DEAD_BAR}"


def test_vpn_quirk_is_per_environment(env, phone):
    env.run_function("user", "break_vpn", {})
    assert "<PerformanceLevel.POOR: 'poor'>" in user(env, "check_vpn_status")
    user(env, "disconnect_vpn")
    assert user(env, "check_vpn_status") == "VPN is turned OFF."
    user(env, "connect_vpn")
    assert "'poor'" in user(env, "check_vpn_status")  # the shared record stayed poor
    fresh = build_environment(Tau2Data(DATA_DIR), "telecom")
    fresh.execute({"id": "u", "name": "connect_vpn", "arguments": {}}, "user")
    assert "<PerformanceLevel.EXCELLENT: 'excellent'>" in fresh.execute(
        {"id": "u", "name": "check_vpn_status", "arguments": {}}, "user")["content"]


def test_routing_of_user_and_agent_tools(env):
    # The classic failure: the agent calls a phone tool. A τ² error, as is the reverse.
    assert agent(env, "toggle_airplane_mode") == ("Error: Tool 'toggle_airplane_mode' not found.", True)
    msg = env.execute({"id": "u", "name": "refuel_data", "arguments": {}}, "user")
    assert msg["error"] and msg["content"] == "Error: Tool 'refuel_data' not found."
    solo = build_environment(Tau2Data(DATA_DIR), "telecom", solo=True)
    assert not solo.execute({"id": "a", "name": "toggle_airplane_mode", "arguments": {}}, "assistant")["error"]
    assert solo.execute({"id": "u", "name": "check_status_bar", "arguments": {}}, "user")["content"] == \
        "Error: User tools not available"
    retail = build_environment(Tau2Data(DATA_DIR), "retail")
    assert retail.execute({"id": "u", "name": "x", "arguments": {}}, "user")["content"] == "Error: User tools not available"


def test_network_mode_that_is_not_a_string_changes_nothing(env, phone):
    # Upstream stores such a mode and runs a network search before it fails (null: before it
    # reports the invalid option); here the call ends the same way and the phone is unchanged.
    before = env.fingerprints()
    for mode in (5, True, ["4g_only"], {"mode": "4g_only"}):
        msg = env.execute({"id": "u", "name": "set_network_mode_preference", "arguments": {"mode": mode}}, "user")
        assert msg["error"] and "must be a string" in msg["content"], msg["content"]
    assert user(env, "set_network_mode_preference", mode=None).startswith(
        "Failed to set network mode: 'None' is not a valid option.")
    assert env.fingerprints() == before and env.user.db["device"]["network_mode_preference"] == "4g_5g_preferred"
