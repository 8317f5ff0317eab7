"""The telecom customer's phone (the user DB) and its "physics": network search, whether
mobile data works, the speed test, MMS capability and the status bar.

Behaviour follows upstream τ²-bench's telecom phone. Connection state changes only during a network search
(airplane toggles, SIM reseat, reboot, ...), never directly from the carrier side; agent
changes reach the phone through ``sync_phone_with_crm`` and show up at the next search.
The constants below are upstream's code values (not its docstrings).
"""

from __future__ import annotations

from envs.tau2.toolkit import REQUIRED, conform

DEFAULT_MMSC_URL = "http://mms.carrier.com/mms/wapenc"
APN = ("record", (("apn_name", "str", "internet"), ("reset_at_reboot", "bool", False), ("mms_apn", ("opt", "str"), "mms"),
                  ("mmsc_url", ("opt", "str"), DEFAULT_MMSC_URL), ("mms_proxy", ("opt", "str"), None),
                  ("mms_port", ("opt", "int"), None)))
VPN = ("record", (("server_address", ("opt", "str"), None), ("protocol", ("opt", "str"), None),
                  ("server_performance", "str", "unknown")))
PERMISSIONS = ("record", (("sms", "bool", False), ("storage", "bool", False), ("phone", "bool", False),
                          ("network", "bool", False)))
APP = ("record", (("app_name", "str", REQUIRED), ("permissions", PERMISSIONS, {})))
DEFAULT_APPS = {"messaging": {"app_name": "messaging", "permissions": {"sms": True, "storage": True, "phone": True}},
                "browser": {"app_name": "browser", "permissions": {"storage": True, "network": True}}}
DEVICE = ("record", (
    ("sim_card_status", "str", "active"), ("sim_card_missing", "bool", False), ("airplane_mode", "bool", False),
    ("network_signal_strength", "str", "good"), ("network_technology_connected", "str", "5G"),
    ("network_connection_status", "str", "connected"), ("battery_level", "int", 80), ("data_enabled", "bool", True),
    ("roaming_enabled", "bool", False), ("network_mode_preference", "str", "4g_5g_preferred"),
    ("active_apn_settings", APN, {}), ("wifi_enabled", "bool", False), ("wifi_connected", "bool", False),
    ("wifi_ssid", ("opt", "str"), None), ("wifi_signal_strength", "str", "none"),
    ("wifi_calling_enabled", "bool", False), ("wifi_calling_mms_over_wifi", "bool", False),
    ("data_saver_mode", "bool", False), ("vpn_enabled_setting", "bool", False), ("vpn_connected", "bool", False),
    ("vpn_details", ("opt", VPN), None), ("app_statuses", ("map", APP), DEFAULT_APPS)))
PAYMENT_REQUEST = ("record", (("bill_id", "str", REQUIRED), ("amount_due", "float", REQUIRED), ("paid", "bool", False)))
SURROUNDINGS = ("record", (
    ("name", ("opt", "str"), None), ("phone_number", ("opt", "str"), None), ("is_abroad", "bool", False),
    ("roaming_allowed", "bool", False),
    ("signal_strength", ("map", "str"), {"2G": "poor", "3G": "fair", "4G": "good", "5G": "excellent"}),
    ("mobile_data_usage_exceeded", "bool", False), ("line_active", "bool", True),
    ("payment_request", ("opt", PAYMENT_REQUEST), None)))
PHONE = ("record", (("device", DEVICE, {}), ("surroundings", SURROUNDINGS, {})))

NETWORK_MODES = ("4g_5g_preferred", "4g_only", "3g_only", "2g_only")
SPEED_RANGES = {"2G": (0.1, 0.4), "3G": (1.0, 5.0), "4G": (10.0, 100.0), "5G": (50.0, 500.0), "none": (0.0, 0.0)}
SIGNAL_FACTORS = {"poor": 0.2, "fair": 0.5, "good": 0.8, "excellent": 1.0, "none": 0.0}
SIGNAL_ICONS = {"none": "\U0001F4F5 No Signal", "poor": "\U0001F4F6\u00b9 Poor", "fair": "\U0001F4F6\u00b2 Fair",
                "good": "\U0001F4F6\u00b3 Good", "excellent": "\U0001F4F6\u2074 Excellent"}


def normalise_db(raw: dict) -> dict:
    """The user DB: the file's ``device`` section over the model defaults, default surroundings."""
    return conform(raw, PHONE, "user_db")


def effective_sim_status(device: dict) -> str:
    return "missing" if device["sim_card_missing"] else device["sim_card_status"]


def network_search(phone: dict) -> None:
    """The only place where connection status, technology and signal change."""
    device, around = phone["device"], phone["surroundings"]
    status, tech, signal = "no_service", "none", "none"
    if effective_sim_status(device) == "active":
        status = "connected"
        mode = device["network_mode_preference"]
        if mode == "4g_5g_preferred":
            tech = "5G"
            if around["signal_strength"].get("5G", "none") == "none":
                tech = "4G"
        else:
            tech = {"4g_only": "4G", "3g_only": "3G", "2g_only": "2G"}[mode]
        signal = around["signal_strength"].get(tech, "none")
    if device["airplane_mode"] or device["active_apn_settings"]["apn_name"] == "broken" or not around["line_active"]:
        status, tech, signal = "no_service", "none", "none"
    device["network_connection_status"] = status
    device["network_technology_connected"] = tech
    device["network_signal_strength"] = signal


def mobile_data_working(phone: dict) -> bool:
    device, around = phone["device"], phone["surroundings"]
    if device["airplane_mode"] or device["network_signal_strength"] == "none":
        return False
    if device["network_connection_status"] == "no_service":
        return False
    if around["is_abroad"] and not (device["roaming_enabled"] and around["roaming_allowed"]):
        return False
    return device["data_enabled"] and not around["mobile_data_usage_exceeded"]


def speed_test(phone: dict) -> tuple[float | None, str]:
    """(Mbps or None, description), from upstream's code (not its docstrings)."""
    if not mobile_data_working(phone):
        return None, "No Connection"
    device = phone["device"]
    vpn = device["vpn_details"]
    base = 0.1 if device["vpn_connected"] and vpn is not None and vpn["server_performance"] == "poor" else 1.0
    if device["data_saver_mode"]:
        base = base * 0.2
    low, high = SPEED_RANGES[device["network_technology_connected"]]
    speed = round(((low + high) / 2.0) * SIGNAL_FACTORS[device["network_signal_strength"]] * base, 2)
    for limit, desc in ((1, "Very Poor"), (5, "Poor"), (25, "Fair"), (100, "Good")):
        if speed < limit:
            return speed, desc
    return speed, "Excellent"


def mms_possible(phone: dict) -> bool:
    device = phone["device"]
    if not mobile_data_working(phone) or device["network_technology_connected"] == "2G":
        return False
    if device["wifi_calling_enabled"] and device["wifi_calling_mms_over_wifi"]:
        return False
    if device["active_apn_settings"]["mmsc_url"] is None:
        return False
    app = device["app_statuses"].get("messaging")
    return app is not None and app["permissions"]["sms"] and app["permissions"]["storage"]


def status_bar(phone: dict) -> str:
    device = phone["device"]
    parts = []
    if device["airplane_mode"]:
        parts.append("\u2708\ufe0f Airplane Mode")
    else:
        parts.append(SIGNAL_ICONS[device["network_signal_strength"]])
        tech = device["network_technology_connected"]
        if tech != "none":
            parts.append(tech)
        if device["data_enabled"] and tech != "none":
            parts.append("\U0001F4F1 Data Enabled")
            if device["data_saver_mode"]:
                parts.append("\U0001F53D Data Saver")
        else:
            parts.append("\U0001F4F5 Data Disabled")
    if device["wifi_enabled"] and device["wifi_connected"]:
        parts.append(f"\U0001F4E1 Connected to {device['wifi_ssid']}" if device["wifi_ssid"] else "\U0001F4E1 Enabled")
    if device["vpn_connected"]:
        parts.append("\U0001F512 VPN Connected")
    parts.append(f"\U0001F50B {device['battery_level']}%")
    return " | ".join(parts)


def sync_phone_with_crm(agent, user) -> None:
    """The sync hook: copy carrier facts onto the phone (after every tool call, step and helper).

    ``agent`` is the CRM toolkit and ``user`` the phone toolkit. It never runs a network
    search, so e.g. a resumed line shows service only after the user reboots or toggles.
    """
    around = user.db["surroundings"]
    number = around["phone_number"]
    if number is None:
        return
    line = agent.line_by_phone(number)
    around["line_active"] = line["status"] == "Active"
    around["roaming_allowed"] = line["roaming_enabled"]
    plan = agent.plan(line["plan_id"])
    around["mobile_data_usage_exceeded"] = line["data_used_gb"] >= plan["data_limit_gb"] + line["data_refueling_gb"]
    request = around["payment_request"]
    if request is not None and request["paid"]:
        agent.bill(request["bill_id"])["status"] = "Paid"
        around["payment_request"] = None
    if around["payment_request"] is None:
        customer = agent.customer_by_phone(number)
        for bill_id in (customer["bill_ids"] if customer else []):
            bill = agent.bill(bill_id)
            if bill["status"] == "Awaiting Payment":
                around["payment_request"] = {"bill_id": bill_id, "amount_due": bill["total_due"], "paid": False}
                break
