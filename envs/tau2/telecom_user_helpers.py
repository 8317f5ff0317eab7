"""The phone's non-tool functions that tasks call by name and no LLM sees: the user-side
initialisation helpers that break the phone for a scenario, and the assertion functions
that score it (the ENV_ASSERTION component). Mixed into ``PhoneTools``.
"""

from __future__ import annotations

from envs.base import ToolError
from envs.tau2.telecom_phone import mms_possible, mobile_data_working, speed_test
from envs.tau2.toolkit import helper

PERMISSION_NAMES = ("sms", "storage", "phone", "network")


class PhoneHelpers:
    """Helpers and assertions over ``self.db`` / ``self.device``; uses PhoneTools' toggles."""

    # ---- user-side initialisation helpers ----------------------------------------------------
    @helper
    def set_user_info(self, name, phone_number):
        self.db["surroundings"].update(name=name, phone_number=phone_number)

    @helper
    def set_user_location(self, abroad):
        self.db["surroundings"]["is_abroad"] = abroad

    def _toggle_until(self, field: str, toggle, wanted: bool) -> None:
        # Upstream toggles first and checks afterwards, so a switch already in the wanted
        # state is toggled twice, and each toggle may run a network search.
        toggle()
        if self.device[field] != wanted:
            toggle()

    @helper
    def turn_airplane_mode_on(self):
        self._toggle_until("airplane_mode", self.toggle_airplane_mode, True)

    @helper
    def turn_airplane_mode_off(self):
        self._toggle_until("airplane_mode", self.toggle_airplane_mode, False)

    @helper
    def turn_data_on(self):
        self.device["data_enabled"] = True  # no network search (upstream)

    @helper
    def turn_data_off(self):
        self._toggle_until("data_enabled", self.toggle_data, False)

    @helper
    def turn_roaming_on(self):
        self._toggle_until("roaming_enabled", self.toggle_roaming, True)

    @helper
    def turn_roaming_off(self):
        self._toggle_until("roaming_enabled", self.toggle_roaming, False)

    @helper
    def turn_data_saver_mode_on(self):
        self._toggle_until("data_saver_mode", self.toggle_data_saver_mode, True)

    @helper
    def turn_data_saver_mode_off(self):
        self._toggle_until("data_saver_mode", self.toggle_data_saver_mode, False)

    @helper
    def unseat_sim_card(self):
        self.device["sim_card_missing"] = True
        self._search()

    @helper
    def lock_sim_card(self, mode):
        if mode in ("pin", "puk"):
            self.device["sim_card_status"] = f"locked_{mode}"
        self._search()

    @helper
    def break_apn_settings(self):
        self.device["active_apn_settings"]["apn_name"] = "broken"
        self._search()

    @helper
    def break_apn_mms_setting(self):
        self.device["active_apn_settings"]["mmsc_url"] = None

    @helper
    def set_wifi_calling(self, enabled, mms_over_wifi=None):
        if self.device["wifi_calling_enabled"] != enabled:
            self.toggle_wifi_calling()
        if mms_over_wifi is not None:
            self.device["wifi_calling_mms_over_wifi"] = mms_over_wifi

    @helper
    def break_vpn(self):
        self.connect_vpn()
        self.device["vpn_details"]["server_performance"] = "poor"

    @helper
    def remove_app_permission(self, app_name, permission):
        permission = permission.lower()
        app = self.device["app_statuses"].get(app_name)
        if app is None or permission not in PERMISSION_NAMES:
            return False, f"App '{app_name}' or permission '{permission}' not found."
        app["permissions"][permission] = False
        return True, f"Permission '{permission}' removed from app '{app_name}'."

    @helper
    def simulate_network_search(self):
        self._search()

    # ---- user-side assertions (the ENV_ASSERTION component) ----------------------------------
    @helper
    def assert_airplane_mode_status(self, expected_status) -> bool:
        return self.device["airplane_mode"] == expected_status

    @helper
    def assert_service_status(self, expected_status) -> bool:
        if expected_status not in ("connected", "searching", "no_service", "emergency_only"):
            raise ToolError(f"'{expected_status}' is not a valid network status")
        return self.device["network_connection_status"] == expected_status

    @helper
    def assert_mobile_data_status(self, expected_status) -> bool:
        return mobile_data_working(self.db) == expected_status

    @helper
    def assert_mobile_roaming_status(self, expected_status) -> bool:
        return self.device["roaming_enabled"] == expected_status

    @helper
    def assert_mobile_data_saver_mode_status(self, expected_status) -> bool:
        return self.device["data_saver_mode"] == expected_status

    @helper
    def assert_internet_speed(self, expected_speed, expected_desc=None) -> bool:
        speed, desc = speed_test(self.db)
        speed = 0.0 if speed is None else speed
        if expected_desc is None:
            return speed >= expected_speed
        return speed >= expected_speed and desc.lower() == expected_desc.lower()

    @helper
    def assert_internet_not_excellent(self) -> bool:
        return speed_test(self.db)[1].lower() != "excellent"

    @helper
    def assert_can_send_mms(self, expected_status) -> bool:
        return mms_possible(self.db) == expected_status

    @helper
    def assert_mobile_data_usage_exceeded(self, expected_status) -> bool:
        return self.db["surroundings"]["mobile_data_usage_exceeded"] == expected_status

