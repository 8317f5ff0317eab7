"""The 30 phone tools the telecom *user* operates (as upstream τ²-bench exposes them); the
initialisation helpers and assertions come from ``PhoneHelpers``.

All tools return strings; many append ``"\\nStatus Bar: ..."``. The "Error. ..." results of
``grant_app_permission`` are ordinary results, not tool errors (upstream behaviour).
"""

from __future__ import annotations

from envs.base import ToolError
from envs.tau2.telecom_phone import (
    APN,
    NETWORK_MODES,
    effective_sim_status,
    mms_possible,
    network_search,
    speed_test,
    status_bar,
)
from envs.tau2.telecom_user_helpers import PERMISSION_NAMES, PhoneHelpers
from envs.tau2.toolkit import Toolkit, conform, tool

SPEED_ADVICE = {"Very Poor": "Connection is very slow. Basic web browsing might be difficult.",
                "Poor": "Connection is slow. Web browsing may be sluggish, streaming difficult.",
                "Fair": "Connection is okay for web browsing and some standard definition streaming.",
                "Good": "Connection is good for most activities, including HD streaming.",
                "Excellent": "Connection is very fast."}
SIM_TEXT = {"active": "Your SIM card is active and working.", "missing": "No SIM card detected in the phone.",
            "locked_pin": "The SIM card is locked with a PIN code.", "locked_puk": "The SIM card is locked with a PUK code."}
_APN_ARG = ({"type": "object", "properties": {
    "apn_name": {"type": "string", "enum": ["internet", "broken"]}, "reset_at_reboot": {"type": "boolean"},
    "mms_apn": {"type": "string"}, "mmsc_url": {"type": "string"}, "mms_proxy": {"type": "string"},
    "mms_port": {"type": "integer"}}}, "The APN configuration; omitted fields take their defaults.")
_APP_ARG = ("string", "The app's name, e.g. 'messaging'.")


def _on_off(flag: bool) -> str:
    return "ON" if flag else "OFF"


class PhoneTools(PhoneHelpers, Toolkit):
    TOOL_ORDER = ("check_status_bar", "check_network_status", "check_network_mode_preference",
                  "set_network_mode_preference", "run_speed_test", "toggle_airplane_mode", "check_sim_status",
                  "reseat_sim_card", "toggle_data", "toggle_roaming", "check_data_restriction_status",
                  "toggle_data_saver_mode", "check_apn_settings", "set_apn_settings", "reset_apn_settings",
                  "check_wifi_status", "toggle_wifi", "check_wifi_calling_status", "toggle_wifi_calling",
                  "check_vpn_status", "connect_vpn", "disconnect_vpn", "check_installed_apps", "check_app_status",
                  "check_app_permissions", "grant_app_permission", "can_send_mms", "reboot_device",
                  "check_payment_request", "make_payment")

    def __init__(self, db: dict):
        super().__init__(db)
        # Upstream shares one default VPN record process-wide; we keep it per environment
        # so episodes stay independent: after break_vpn, reconnecting in the same episode stays "poor".
        self._default_vpn = {"server_address": "192.168.1.1", "protocol": "OpenVPN", "server_performance": "excellent"}

    @property
    def device(self) -> dict:
        return self.db["device"]

    def _with_bar(self, text: str) -> str:
        return f"{text}\nStatus Bar: {status_bar(self.db)}"

    def _search(self) -> None:
        network_search(self.db)

    # ---- read tools -------------------------------------------------------------------------
    @tool("read", "Show the icons of the phone's status bar (signal, network type, data, battery).")
    def check_status_bar(self):
        return f"Status Bar: {status_bar(self.db)}"

    @tool("read", "Show a summary of cellular and Wi-Fi connectivity.")
    def check_network_status(self):
        d = self.device
        lines = [f"Airplane Mode: {_on_off(d['airplane_mode'])}", f"SIM Card Status: {effective_sim_status(d)}",
                 f"Cellular Connection: {d['network_connection_status']}",
                 f"Cellular Signal: {d['network_signal_strength']}",
                 f"Cellular Network Type: {d['network_technology_connected']}",
                 f"Mobile Data Enabled: {'Yes' if d['data_enabled'] else 'No'}",
                 f"Data Roaming Enabled: {'Yes' if d['roaming_enabled'] else 'No'}",
                 f"Wi-Fi Radio: {_on_off(d['wifi_enabled'])}",
                 f"Wi-Fi Connected: {'Yes' if d['wifi_connected'] else 'No'}"]
        if d["wifi_connected"]:
            lines.append(f"Connected Wi-Fi Network: {d['wifi_ssid']}")
        return "\n".join(lines)

    @tool("read", "Show the preferred network type.")
    def check_network_mode_preference(self):
        return f"Network Mode Preference: {self.device['network_mode_preference']}"

    @tool("write", "Choose the preferred network type.",
          mode=({"type": "string", "enum": list(NETWORK_MODES)}, "One of 4g_5g_preferred, 4g_only, 3g_only, 2g_only."))
    def set_network_mode_preference(self, mode):
        # A deliberate deviation: upstream stores a non-string as the preference and runs a network
        # search before failing (or, for null, before reporting the invalid option); here the
        # call fails (null: reports) the same way but the phone stays unchanged.
        if mode is not None and not isinstance(mode, str):
            raise ToolError(f"Failed to set network mode: the mode must be a string, got {type(mode).__name__}")
        if mode not in NETWORK_MODES:
            return self._with_bar(f"Failed to set network mode: '{mode}' is not a valid option. "
                                  f"Please use one of: {', '.join(NETWORK_MODES)}")
        self.device["network_mode_preference"] = mode
        self._search()
        return self._with_bar(f"Preferred Network Mode set to: {mode}")

    @tool("read", "Measure the mobile-data download speed.")
    def run_speed_test(self):
        speed, desc = speed_test(self.db)
        if speed is None:
            return "Speed test failed: No Connection."
        return f"Speed Test Result: {speed:.2f} Mbps ({desc}). {SPEED_ADVICE[desc]}"

    @tool("read", "Show the SIM card's state.")
    def check_sim_status(self):
        return SIM_TEXT[effective_sim_status(self.device)]

    @tool("read", "Show whether Data Saver mode is on.")
    def check_data_restriction_status(self):
        return "Data Saver mode is ON (limits data usage)." if self.device["data_saver_mode"] else "Data Saver mode is OFF."

    @tool("read", "Show the APN name and the MMSC URL.")
    def check_apn_settings(self):
        apn = self.device["active_apn_settings"]
        return (f"Current APN Name: {apn['apn_name']}\nMMSC URL (for picture messages): {apn['mmsc_url'] or 'Not Set'}\n"
                "(These are technical settings, usually best left unchanged.)")

    @tool("read", "Show the Wi-Fi state.")
    def check_wifi_status(self):
        d = self.device
        if not d["wifi_enabled"]:
            return "Wi-Fi is turned OFF."
        if not d["wifi_connected"]:
            return "Wi-Fi is ON but not connected to any network."
        return f"Wi-Fi is ON and connected to '{d['wifi_ssid']}'. Signal strength: {d['wifi_signal_strength']}."

    @tool("read", "Show whether Wi-Fi Calling is on.")
    def check_wifi_calling_status(self):
        return f"Wi-Fi Calling is currently turned {_on_off(self.device['wifi_calling_enabled'])}."

    @tool("read", "Show the VPN state.")
    def check_vpn_status(self):
        d = self.device
        if d["vpn_connected"]:
            vpn = d["vpn_details"]
            if vpn is None:
                return "VPN is ON and connected (no specific details available)."
            perf = vpn["server_performance"]
            # Upstream prints the record's Python repr, enum member included (an upstream quirk, kept).
            return (f"VPN is ON and connected. Details: {{'server_address': {vpn['server_address']!r}, "
                    f"'protocol': {vpn['protocol']!r}, "
                    f"'server_performance': <PerformanceLevel.{perf.upper()}: {perf!r}>}}")
        if d["vpn_enabled_setting"]:
            return "VPN is turned ON in settings, but currently not connected."
        return "VPN is turned OFF."

    @tool("read", "List the installed apps.")
    def check_installed_apps(self):
        return f"The following apps are installed on the phone: {', '.join(self.device['app_statuses'])}"

    @tool("read", "Show an app's status and granted permissions.", app_name=_APP_ARG)
    def check_app_status(self, app_name):
        app = self.device["app_statuses"].get(app_name)
        if app is None:
            return f"App '{app_name}' not found on this phone."
        granted = [p for p in PERMISSION_NAMES if app["permissions"][p]]
        if not granted:
            return f"Status for App: {app_name}\n - Permissions: None granted."
        return f"Status for App: {app_name}\n - Permissions Granted:\n" + "\n".join(f"   - {p}" for p in granted)

    @tool("read", "Show which permissions an app has.", app_name=_APP_ARG)
    def check_app_permissions(self, app_name):
        app = self.device["app_statuses"].get(app_name)
        if app is None:
            return f"App '{app_name}' not found on this phone."
        granted = [p for p in PERMISSION_NAMES if app["permissions"][p]]
        if not granted:
            return f"App '{app_name}' currently has no permissions granted."
        return f"App '{app_name}' has permission for: {', '.join(granted)}."

    @tool("read", "Check whether the messaging app can send MMS (picture) messages.")
    def can_send_mms(self):
        if mms_possible(self.db):
            return "Your messaging app can send MMS messages."
        return "Your messaging app cannot send MMS messages."

    @tool("read", "Check whether the carrier has sent a payment request for a bill.")
    def check_payment_request(self):
        request = self.db["surroundings"]["payment_request"]
        if request is None:
            return "No payment request has been made."
        return f"You have a payment request for bill {request['bill_id']} of {request['amount_due']} USD."

    # ---- write tools ------------------------------------------------------------------------
    @tool("write", "Turn airplane mode on or off (toggle).")
    def toggle_airplane_mode(self):
        d = self.device
        turning_on = not d["airplane_mode"]
        d["airplane_mode"] = turning_on
        if turning_on:
            self._drop_wifi_connection()
            if d["vpn_connected"]:
                d["vpn_connected"] = False
                d["vpn_details"] = None
        else:
            d["network_connection_status"] = "searching"
            if d["wifi_enabled"]:
                self._drop_wifi_connection()
        self._search()
        return self._with_bar(f"Airplane Mode is now {_on_off(turning_on)}.")

    def _drop_wifi_connection(self) -> None:
        self.device.update(wifi_connected=False, wifi_ssid=None, wifi_signal_strength="none")

    @tool("write", "Remove and reinsert the SIM card.")
    def reseat_sim_card(self):
        self.device["sim_card_missing"] = False
        self._search()
        return self._with_bar("SIM card re-seated successfully.")

    @tool("write", "Turn mobile data on or off (toggle).")
    def toggle_data(self):
        self.device["data_enabled"] = not self.device["data_enabled"]
        self._search()
        return self._with_bar(f"Mobile Data is now {_on_off(self.device['data_enabled'])}.")

    @tool("write", "Turn data roaming on or off (toggle).")
    def toggle_roaming(self):
        self.device["roaming_enabled"] = not self.device["roaming_enabled"]
        self._search()
        return self._with_bar(f"Data Roaming is now {_on_off(self.device['roaming_enabled'])}.")

    @tool("write", "Turn Data Saver mode on or off (toggle).")
    def toggle_data_saver_mode(self):
        self.device["data_saver_mode"] = not self.device["data_saver_mode"]
        return self._with_bar(f"Data Saver Mode is now {_on_off(self.device['data_saver_mode'])}.")

    @tool("write", "Set the APN configuration.", apn_settings=_APN_ARG)
    def set_apn_settings(self, apn_settings):
        # A deliberate deviation: upstream stores a non-object as the APN record and leaves the phone
        # broken for later calls; here it is rejected and the state stays unchanged.
        if not isinstance(apn_settings, dict):
            raise ToolError("1 validation error for APNSettings\n  Input should be an object")
        try:
            apn = conform(apn_settings, APN, "APNSettings")
        except (ValueError, TypeError) as e:
            raise ToolError(f"1 validation error for APNSettings\n  {e}") from None
        if apn["apn_name"] not in ("internet", "broken"):
            raise ToolError("1 validation error for APNSettings\napn_name\n  Input should be 'internet' or 'broken'")
        self.device["active_apn_settings"] = apn
        self._search()
        return self._with_bar(f"APN settings set to: {apn['apn_name']}")

    @tool("write", "Reset the APN settings to their defaults (applied at the next reboot).")
    def reset_apn_settings(self):
        self.device["active_apn_settings"]["reset_at_reboot"] = True
        self._search()
        return self._with_bar("APN settings will reset at reboot.")

    @tool("write", "Turn the Wi-Fi radio on or off (toggle).")
    def toggle_wifi(self):
        d = self.device
        if d["airplane_mode"]:
            return self._with_bar("Cannot change Wi-Fi settings while Airplane Mode is ON.")
        d["wifi_enabled"] = not d["wifi_enabled"]
        if not d["wifi_enabled"]:
            self._drop_wifi_connection()
        return self._with_bar(f"Wi-Fi is now {_on_off(d['wifi_enabled'])}.")

    @tool("write", "Turn Wi-Fi Calling on or off (toggle).")
    def toggle_wifi_calling(self):
        self.device["wifi_calling_enabled"] = not self.device["wifi_calling_enabled"]
        return self._with_bar(f"Wi-Fi Calling is now {_on_off(self.device['wifi_calling_enabled'])}.")

    @tool("write", "Connect the VPN.")
    def connect_vpn(self):
        if self.device["vpn_connected"]:
            return "VPN already connected."
        self.device["vpn_connected"] = True
        self.device["vpn_details"] = self._default_vpn  # the shared record (quirk, per environment)
        return self._with_bar("VPN connected successfully.")

    @tool("write", "Disconnect the VPN.")
    def disconnect_vpn(self):
        if not self.device["vpn_connected"]:
            return self._with_bar("No active VPN connection to disconnect.")
        self.device["vpn_connected"] = False
        self.device["vpn_details"] = None
        return self._with_bar("VPN disconnected successfully.")

    @tool("write", "Grant a permission to an app.", app_name=_APP_ARG,
          permission=("string", "One of sms, storage, phone, network."))
    def grant_app_permission(self, app_name, permission):
        permission = permission.lower()
        app = self.device["app_statuses"].get(app_name)
        if app is None:
            return self._with_bar(f"Error. App '{app_name}' not found. Cannot grant permission.")
        if permission not in PERMISSION_NAMES:
            return self._with_bar(f"Error. Permission '{permission}' not tracked for app '{app_name}', "
                                  f"available permissions: {list(PERMISSION_NAMES)}")
        app["permissions"][permission] = True
        return self._with_bar(f"Success. Permission '{permission}' granted to app '{app_name}'.")

    @tool("write", "Restart the phone.")
    def reboot_device(self):
        d = self.device
        lines = []
        if d["active_apn_settings"]["reset_at_reboot"]:
            d["active_apn_settings"] = conform({}, APN)
            lines.append("Resetting APN settings...")
        d["network_connection_status"] = "searching"
        self._search()
        lines.append("Restarting network services...")
        return self._with_bar("\n".join(lines))

    @tool("write", "Pay the bill of the pending payment request.")
    def make_payment(self):
        request = self.db["surroundings"]["payment_request"]
        if request is None:
            return "You do not have a payment request."
        request["paid"] = True
        return f"Payment of {request['amount_due']} USD has been made for bill {request['bill_id']}."
