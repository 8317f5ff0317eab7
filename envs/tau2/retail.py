"""The τ² retail domain: products, users and orders, with 15 agent tools.

Behaviour follows upstream τ²-bench's retail domain, quirks included (a multi-item modification copies
the last variant's price and options to every modified item; cancellation refunds every
history entry; modification amounts are unrounded floats), because the tasks' gold
states depend on them. All money is Python floats, summed in the specified order.
"""

from __future__ import annotations

import json

from envs.base import ToolError
from envs.tau2.toolkit import Toolkit, make_record, tool

ORDER_OPTIONAL_FIELDS = ("cancel_reason", "exchange_items", "exchange_new_items", "exchange_payment_method_id",
                         "exchange_price_difference", "return_items", "return_payment_method_id")
ADDRESS = {"address1": "str", "address2": "str", "city": "str", "country": "str", "state": "str", "zip": "str"}
_ITEM_IDS = ({"type": "array", "items": {"type": "string"}}, "Item ids, e.g. ['1008292230']; repeat an id to act on several units.")
_ORDER_ID = ("string", "The order id, starting with '#', e.g. '#W0000000'.")
_PAYMENT_ID = ("string", "A payment method id from the user's profile, e.g. 'gift_card_0000000'.")
_ADDRESS_ARGS = {"address1": ("string", "First address line."), "address2": ("string", "Second address line (may be empty)."),
                 "city": ("string", "City."), "state": ("string", "State, e.g. 'NY'."),
                 "country": ("string", "Country, e.g. 'USA'."), "zip": ("string", "Zip code, e.g. '12345'.")}


def normalise_db(db: dict) -> dict:
    """Canonical form: the seven optional order fields exist as nulls."""
    for order in db["orders"].values():
        for name in ORDER_OPTIONAL_FIELDS:
            order.setdefault(name, None)
    return db


def _too_many(requested: list, present: list) -> str | None:
    """The first requested id that occurs more often in the request than in the order."""
    for item_id in requested:
        if requested.count(item_id) > present.count(item_id):
            return item_id
    return None


class RetailTools(Toolkit):
    TOOL_ORDER = ("calculate", "cancel_pending_order", "exchange_delivered_order_items", "find_user_id_by_name_zip",
                  "find_user_id_by_email", "get_order_details", "get_product_details", "get_user_details",
                  "list_all_product_types", "modify_pending_order_address", "modify_pending_order_items",
                  "modify_pending_order_payment", "modify_user_address", "return_delivered_order_items",
                  "transfer_to_human_agents")

    # ---- lookups (upstream's exact error texts) -----------------------------------------
    def _order(self, order_id):
        if order_id not in self.db["orders"]:
            raise ToolError("Order not found")
        return self.db["orders"][order_id]

    def _user(self, user_id):
        if user_id not in self.db["users"]:
            raise ToolError("User not found")
        return self.db["users"][user_id]

    def _product(self, product_id):
        if product_id not in self.db["products"]:
            raise ToolError("Product not found")
        return self.db["products"][product_id]

    def _variant(self, product_id, item_id):
        variants = self._product(product_id)["variants"]
        if item_id not in variants:
            raise ToolError("Variant not found")
        return variants[item_id]

    def _payment_method(self, user_id, method_id):
        methods = self._user(user_id)["payment_methods"]
        if method_id not in methods:
            raise ToolError("Payment method not found")
        return methods[method_id]

    def _price_difference(self, order: dict, item_ids: list, new_item_ids: list, allow_same: bool):
        """Sum of (new variant price - old item price) in pair order; also the last variant."""
        diff, variant = 0, None
        for old, new in zip(item_ids, new_item_ids):
            if not allow_same and old == new:
                raise ToolError("The new item id should be different from the old item id")
            item = next((it for it in order["items"] if it["item_id"] == old), None)
            if item is None:
                raise ToolError(f"Item {old} not found")
            variant = self._variant(item["product_id"], new)
            if not variant["available"]:
                raise ToolError(f"New item {new} not found or available")
            diff += variant["price"] - item["price"]
        return diff, variant

    # ---- tools ------------------------------------------------------------------------------
    @tool("write", "Cancel a pending order; the payments are refunded (gift cards immediately).",
          order_id=_ORDER_ID,
          reason=({"type": "string", "enum": ["no longer needed", "ordered by mistake"]}, "Why the order is cancelled."))
    def cancel_pending_order(self, order_id, reason):
        order = self._order(order_id)
        if order["status"] != "pending":
            raise ToolError("Non-pending order cannot be cancelled")
        if reason not in ("no longer needed", "ordered by mistake"):
            raise ToolError("Invalid reason")
        refunds = []
        for entry in order["payment_history"]:  # every entry, whatever its type (quirk)
            refunds.append({"transaction_type": "refund", "amount": entry["amount"],
                            "payment_method_id": entry["payment_method_id"]})
            method = self._payment_method(order["user_id"], entry["payment_method_id"])
            if method["source"] == "gift_card":
                method["balance"] = round(method["balance"] + entry["amount"], 2)
        order["status"] = "cancelled"
        order["cancel_reason"] = reason
        order["payment_history"].extend(refunds)
        return order

    @tool("write", "Request an exchange of delivered items for other variants of the same products.",
          order_id=_ORDER_ID, item_ids=_ITEM_IDS,
          new_item_ids=(_ITEM_IDS[0], "The new item ids, one per exchanged item, in the same order."),
          payment_method_id=(_PAYMENT_ID[0], "Payment method for the price difference."))
    def exchange_delivered_order_items(self, order_id, item_ids, new_item_ids, payment_method_id):
        order = self._order(order_id)
        if order["status"] != "delivered":
            raise ToolError("Non-delivered order cannot be exchanged")
        missing = _too_many(item_ids, [it["item_id"] for it in order["items"]])
        if missing is not None:
            raise ToolError(f"Number of {missing} not found.")
        if len(item_ids) != len(new_item_ids):
            raise ToolError("The number of items to be exchanged should match.")
        diff, _ = self._price_difference(order, item_ids, new_item_ids, allow_same=True)
        diff = round(diff, 2)
        method = self._payment_method(order["user_id"], payment_method_id)
        if method["source"] == "gift_card" and method["balance"] < diff:
            raise ToolError("Insufficient gift card balance to pay for the price difference")
        order["status"] = "exchange requested"
        order["exchange_items"] = sorted(item_ids)
        order["exchange_new_items"] = sorted(new_item_ids)
        order["exchange_payment_method_id"] = payment_method_id
        # Kept as computed: prices are floats, but an exchange of no items leaves the sum at the
        # integer 0, which upstream stores (and fingerprints) as is.
        order["exchange_price_difference"] = diff
        return order

    @tool("read", "Find a user id from first name, last name and zip code.",
          first_name=("string", "First name, e.g. 'John'."), last_name=("string", "Last name, e.g. 'Doe'."),
          zip=("string", "Zip code, e.g. '12345'."))
    def find_user_id_by_name_zip(self, first_name, last_name, zip):
        for user_id, user in self.db["users"].items():
            name = user["name"]
            if (name["first_name"].lower() == first_name.lower() and name["last_name"].lower() == last_name.lower()
                    and user["address"]["zip"] == zip):
                return user_id
        raise ToolError("User not found")

    @tool("read", "Find a user id from an email address.", email=("string", "Email, e.g. 'john@example.com'."))
    def find_user_id_by_email(self, email):
        for user_id, user in self.db["users"].items():
            if user["email"].lower() == email.lower():
                return user_id
        raise ToolError("User not found")

    @tool("read", "Get the status and details of an order.", order_id=_ORDER_ID)
    def get_order_details(self, order_id):
        return self._order(order_id)

    @tool("read", "Get a product and all its variants (pass a product id, not an item id).",
          product_id=("string", "The product id, e.g. '6086499569'."))
    def get_product_details(self, product_id):
        return self._product(product_id)

    @tool("read", "Get a user's profile: name, address, email, payment methods and orders.",
          user_id=("string", "The user id, e.g. 'sara_doe_496'."))
    def get_user_details(self, user_id):
        return self._user(user_id)

    @tool("read", "List every product type (name) with its product id.")
    def list_all_product_types(self):
        return json.dumps({p["name"]: p["product_id"] for p in self.db["products"].values()}, sort_keys=True)

    @tool("write", "Change the shipping address of a pending order.", order_id=_ORDER_ID, **_ADDRESS_ARGS)
    def modify_pending_order_address(self, order_id, address1, address2, city, state, country, zip):
        order = self._order(order_id)
        if "pending" not in order["status"]:
            raise ToolError("Non-pending order cannot be modified")
        order["address"] = make_record("UserAddress", {"address1": address1, "address2": address2, "city": city,
                                                       "country": country, "state": state, "zip": zip}, ADDRESS)
        return order

    @tool("write", "Swap items of a pending order for other variants of the same products (only once per order).",
          order_id=_ORDER_ID, item_ids=_ITEM_IDS,
          new_item_ids=(_ITEM_IDS[0], "The new item ids, one per modified item, in the same order."),
          payment_method_id=(_PAYMENT_ID[0], "Payment method to pay or receive the price difference."))
    def modify_pending_order_items(self, order_id, item_ids, new_item_ids, payment_method_id):
        order = self._order(order_id)
        if order["status"] != "pending":
            raise ToolError("Non-pending order cannot be modified")
        missing = _too_many(item_ids, [it["item_id"] for it in order["items"]])
        if missing is not None:
            raise ToolError(f"{missing} not found")
        if len(item_ids) != len(new_item_ids):
            raise ToolError("The number of items to be exchanged should match")
        diff, variant = self._price_difference(order, item_ids, new_item_ids, allow_same=False)
        method = self._payment_method(order["user_id"], payment_method_id)
        if method["source"] == "gift_card" and method["balance"] < diff:
            raise ToolError("Insufficient gift card balance to pay for the new item")
        order["payment_history"].append({"transaction_type": "payment" if diff > 0 else "refund",
                                         "amount": float(abs(diff)), "payment_method_id": payment_method_id})
        if method["source"] == "gift_card":
            method["balance"] = round(method["balance"] - diff, 2)
        for old, new in zip(item_ids, new_item_ids):
            item = next(it for it in order["items"] if it["item_id"] == old)
            # Quirk reproduced: every modified item takes the LAST pair's variant price/options.
            item["item_id"] = new
            item["price"] = variant["price"]
            item["options"] = dict(variant["options"])
        order["status"] = "pending (item modified)"
        return order

    @tool("write", "Pay a pending order with a different payment method (the old one is refunded).",
          order_id=_ORDER_ID, payment_method_id=(_PAYMENT_ID[0], "The new payment method."))
    def modify_pending_order_payment(self, order_id, payment_method_id):
        order = self._order(order_id)
        if "pending" not in order["status"]:
            raise ToolError("Non-pending order cannot be modified")
        method = self._payment_method(order["user_id"], payment_method_id)
        history = order["payment_history"]
        if len(history) != 1 or history[0]["transaction_type"] != "payment":
            raise ToolError("There should be exactly one payment for a pending order")
        old_id = history[0]["payment_method_id"]
        if old_id == payment_method_id:
            raise ToolError("The new payment method should be different from the current one")
        amount = history[0]["amount"]
        if method["source"] == "gift_card" and method["balance"] < amount:
            raise ToolError("Insufficient gift card balance to pay for the order")
        history.append({"transaction_type": "payment", "amount": amount, "payment_method_id": payment_method_id})
        history.append({"transaction_type": "refund", "amount": amount, "payment_method_id": old_id})
        if method["source"] == "gift_card":
            method["balance"] = round(method["balance"] - amount, 2)
        old = self._payment_method(order["user_id"], old_id)
        if old["source"] == "gift_card":
            old["balance"] = round(old["balance"] + amount, 2)
        return order

    @tool("write", "Change a user's default address (orders keep theirs).",
          user_id=("string", "The user id, e.g. 'sara_doe_496'."), **_ADDRESS_ARGS)
    def modify_user_address(self, user_id, address1, address2, city, state, country, zip):
        user = self._user(user_id)
        user["address"] = make_record("UserAddress", {"address1": address1, "address2": address2, "city": city,
                                                      "country": country, "state": state, "zip": zip}, ADDRESS)
        return user

    @tool("write", "Request a return of delivered items; the refund goes to the original method or a gift card.",
          order_id=_ORDER_ID, item_ids=_ITEM_IDS,
          payment_method_id=(_PAYMENT_ID[0], "Refund destination: the original payment method or a gift card."))
    def return_delivered_order_items(self, order_id, item_ids, payment_method_id):
        order = self._order(order_id)
        if order["status"] != "delivered":
            raise ToolError("Non-delivered order cannot be returned")
        method = self._payment_method(order["user_id"], payment_method_id)
        if method["source"] != "gift_card" and payment_method_id != order["payment_history"][0]["payment_method_id"]:
            raise ToolError("Payment method should be the original payment method")
        if _too_many(item_ids, [it["item_id"] for it in order["items"]]) is not None:
            raise ToolError("Some item not found")
        order["status"] = "return requested"
        order["return_items"] = sorted(item_ids)
        order["return_payment_method_id"] = payment_method_id
        return order
