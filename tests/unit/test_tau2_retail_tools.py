"""Retail tools: every error branch of the write tools, and spot checks."""

import json

import pytest

from envs.tau2.data import Tau2Data
from envs.tau2.domains import build_environment
from tests.unit.tau2_testdata import DATA_DIR, needs_data

pytestmark = needs_data

# omar_silva_7446: paypal, credit card, gift card (68.0); the pending order is paid by the gift card.
PENDING, P_GIFT, P_CARD, P_PAYPAL = "#W9728773", "gift_card_5540683", "credit_card_5322562", "paypal_2192303"
P_ITEM, P_PRODUCT = "7127170374", "1808611083"  # 52.03; the order also holds 5645314103 of the same product
# amelia_wilson_4614: paypal, gift card (97.0); the delivered order was paid by the gift card.
DELIVERED, D_GIFT, D_PAYPAL = "#W9077205", "gift_card_7108145", "paypal_4101143"
D_ITEM = "9370300555"  # product 1808611083, 45.90
PROCESSED = "#W2611340"
ADDRESS = dict(address1="1 Main St", address2="", city="Austin", state="TX", country="USA", zip="78701")


@pytest.fixture
def env():
    return build_environment(Tau2Data(DATA_DIR), "retail")


def call(env, name, **arguments):
    msg = env.execute({"id": "t", "name": name, "arguments": arguments})
    return msg["content"], msg["error"]


def ok(env, name, **arguments):
    content, error = call(env, name, **arguments)
    assert not error, content
    return json.loads(content)


def fails(env, name, needle, **arguments):
    before = env.fingerprints()
    content, error = call(env, name, **arguments)
    assert error and content.startswith("Error: ") and needle in content, content
    assert env.fingerprints() == before


def variant(env, product_id, available=True, exclude=()):
    """The first variant of a product with the given availability, not in ``exclude``."""
    return next(v for v in env.agent.db["products"][product_id]["variants"].values()
                if v["available"] == available and v["item_id"] not in exclude)


def test_cancel_pending_order(env):
    fails(env, "cancel_pending_order", "Order not found", order_id="W9728773", reason="no longer needed")
    fails(env, "cancel_pending_order", "Non-pending order cannot be cancelled", order_id=PROCESSED,
          reason="no longer needed")
    fails(env, "cancel_pending_order", "Invalid reason", order_id=PENDING, reason="too expensive")
    order = ok(env, "cancel_pending_order", order_id=PENDING, reason="ordered by mistake")
    assert order["status"] == "cancelled" and order["cancel_reason"] == "ordered by mistake"
    assert order["payment_history"][-1] == {"transaction_type": "refund", "amount": 1412.7, "payment_method_id": P_GIFT}
    assert env.agent.db["users"]["omar_silva_7446"]["payment_methods"][P_GIFT]["balance"] == round(68.0 + 1412.7, 2)


def test_cancel_pending_order_unknown_payment_method(env):
    env.agent.db["orders"][PENDING]["payment_history"][0]["payment_method_id"] = "gift_card_0"
    fails(env, "cancel_pending_order", "Payment method not found", order_id=PENDING, reason="no longer needed")


def test_exchange_delivered_order_items(env):
    new = variant(env, P_PRODUCT, exclude=(D_ITEM,))["item_id"]
    args = dict(order_id=DELIVERED, item_ids=[D_ITEM], new_item_ids=[new], payment_method_id=D_PAYPAL)
    fails(env, "exchange_delivered_order_items", "Order not found", **{**args, "order_id": "#W0"})
    fails(env, "exchange_delivered_order_items", "Non-delivered order cannot be exchanged", **{**args, "order_id": PENDING})
    fails(env, "exchange_delivered_order_items", f"Number of {D_ITEM} not found.",
          **{**args, "item_ids": [D_ITEM, D_ITEM], "new_item_ids": [new, new]})
    fails(env, "exchange_delivered_order_items", "The number of items to be exchanged should match.",
          **{**args, "new_item_ids": [new, new]})
    fails(env, "exchange_delivered_order_items", "Variant not found", **{**args, "new_item_ids": ["0000000000"]})
    gone = variant(env, P_PRODUCT, available=False)["item_id"]
    fails(env, "exchange_delivered_order_items", f"New item {gone} not found or available",
          **{**args, "new_item_ids": [gone]})
    fails(env, "exchange_delivered_order_items", "Payment method not found", **{**args, "payment_method_id": "paypal_1"})
    gift = env.agent.db["users"]["amelia_wilson_4614"]["payment_methods"][D_GIFT]
    gift["balance"] = -1000.0  # below any price difference
    fails(env, "exchange_delivered_order_items", "Insufficient gift card balance to pay for the price difference",
          **{**args, "payment_method_id": D_GIFT})
    gift["balance"] = 97.0
    order = ok(env, "exchange_delivered_order_items", **args)
    assert order["status"] == "exchange requested" and order["exchange_items"] == [D_ITEM]
    assert order["exchange_new_items"] == [new] and order["exchange_payment_method_id"] == D_PAYPAL
    price = env.agent.db["products"][P_PRODUCT]["variants"][new]["price"]
    assert order["exchange_price_difference"] == round(price - 45.9, 2)
    assert len(order["payment_history"]) == 1  # nothing charged yet


def test_exchange_with_an_unknown_product(env):
    env.agent.db["orders"][DELIVERED]["items"][0]["product_id"] = "0"
    fails(env, "exchange_delivered_order_items", "Product not found", order_id=DELIVERED, item_ids=[D_ITEM],
          new_item_ids=[D_ITEM], payment_method_id=D_PAYPAL)


def test_modify_pending_order_address(env):
    fails(env, "modify_pending_order_address", "Order not found", order_id="#W0", **ADDRESS)
    fails(env, "modify_pending_order_address", "Non-pending order cannot be modified", order_id=PROCESSED, **ADDRESS)
    fails(env, "modify_pending_order_address", "valid string", order_id=PENDING, **{**ADDRESS, "zip": 78701})
    assert ok(env, "modify_pending_order_address", order_id=PENDING, **ADDRESS)["address"] == ADDRESS


def test_modify_pending_order_items(env):
    new = variant(env, P_PRODUCT, exclude=(P_ITEM, "5645314103"))
    args = dict(order_id=PENDING, item_ids=[P_ITEM], new_item_ids=[new["item_id"]], payment_method_id=P_CARD)
    fails(env, "modify_pending_order_items", "Order not found", **{**args, "order_id": "#W0"})
    fails(env, "modify_pending_order_items", "Non-pending order cannot be modified", **{**args, "order_id": DELIVERED})
    fails(env, "modify_pending_order_items", f"{P_ITEM} not found",
          **{**args, "item_ids": [P_ITEM, P_ITEM], "new_item_ids": [new["item_id"]] * 2})
    fails(env, "modify_pending_order_items", "The number of items to be exchanged should match",
          **{**args, "new_item_ids": []})
    fails(env, "modify_pending_order_items", "The new item id should be different from the old item id",
          **{**args, "new_item_ids": [P_ITEM]})
    fails(env, "modify_pending_order_items", "Variant not found", **{**args, "new_item_ids": ["0000000000"]})
    gone = variant(env, P_PRODUCT, available=False)["item_id"]
    fails(env, "modify_pending_order_items", f"New item {gone} not found or available", **{**args, "new_item_ids": [gone]})
    fails(env, "modify_pending_order_items", "Payment method not found", **{**args, "payment_method_id": "paypal_1"})
    pricey = max(env.agent.db["products"][P_PRODUCT]["variants"].values(), key=lambda v: v["price"] * v["available"])
    assert pricey["price"] > 52.03
    gift = env.agent.db["users"]["omar_silva_7446"]["payment_methods"][P_GIFT]
    gift["balance"] = 0.0
    fails(env, "modify_pending_order_items", "Insufficient gift card balance to pay for the new item",
          **{**args, "new_item_ids": [pricey["item_id"]], "payment_method_id": P_GIFT})
    gift["balance"] = 68.0
    order = ok(env, "modify_pending_order_items", **{**args, "payment_method_id": P_GIFT})
    diff = new["price"] - 52.03
    assert order["status"] == "pending (item modified)"
    assert order["payment_history"][-1] == {"transaction_type": "payment" if diff > 0 else "refund",
                                            "amount": abs(diff), "payment_method_id": P_GIFT}
    assert env.agent.db["users"]["omar_silva_7446"]["payment_methods"][P_GIFT]["balance"] == round(68.0 - diff, 2)
    item = next(i for i in order["items"] if i["item_id"] == new["item_id"])
    assert item["price"] == new["price"] and item["options"] == new["options"]
    fails(env, "modify_pending_order_items", "Non-pending order cannot be modified", **args)  # only once


def test_modify_pending_order_items_copies_the_last_variant(env):
    # Quirk: with two pairs every modified item takes the LAST pair's price and options.
    first = variant(env, P_PRODUCT, exclude=(P_ITEM, "5645314103"))
    last = variant(env, P_PRODUCT, exclude=(P_ITEM, "5645314103", first["item_id"]))
    order = ok(env, "modify_pending_order_items", order_id=PENDING, item_ids=[P_ITEM, "5645314103"],
               new_item_ids=[first["item_id"], last["item_id"]], payment_method_id=P_CARD)
    changed = [i for i in order["items"] if i["item_id"] in (first["item_id"], last["item_id"])]
    assert [i["price"] for i in changed] == [last["price"]] * 2
    assert [i["options"] for i in changed] == [last["options"]] * 2


def test_modify_pending_order_payment(env):
    fails(env, "modify_pending_order_payment", "Order not found", order_id="#W0", payment_method_id=P_CARD)
    fails(env, "modify_pending_order_payment", "Non-pending order cannot be modified", order_id=PROCESSED,
          payment_method_id=P_CARD)
    fails(env, "modify_pending_order_payment", "Payment method not found", order_id=PENDING, payment_method_id="x")
    fails(env, "modify_pending_order_payment", "The new payment method should be different from the current one",
          order_id=PENDING, payment_method_id=P_GIFT)
    order = ok(env, "modify_pending_order_payment", order_id=PENDING, payment_method_id=P_PAYPAL)
    assert order["payment_history"][1:] == [
        {"transaction_type": "payment", "amount": 1412.7, "payment_method_id": P_PAYPAL},
        {"transaction_type": "refund", "amount": 1412.7, "payment_method_id": P_GIFT}]
    assert env.agent.db["users"]["omar_silva_7446"]["payment_methods"][P_GIFT]["balance"] == round(68.0 + 1412.7, 2)
    fails(env, "modify_pending_order_payment", "There should be exactly one payment for a pending order",
          order_id=PENDING, payment_method_id=P_CARD)


def test_modify_pending_order_payment_to_a_short_gift_card(env):
    env.agent.db["orders"][PENDING]["payment_history"][0]["payment_method_id"] = P_CARD  # 1412.7 > 68.0
    fails(env, "modify_pending_order_payment", "Insufficient gift card balance to pay for the order",
          order_id=PENDING, payment_method_id=P_GIFT)


def test_modify_user_address(env):
    fails(env, "modify_user_address", "User not found", user_id="nobody", **ADDRESS)
    fails(env, "modify_user_address", "valid string", user_id="omar_silva_7446", **{**ADDRESS, "city": None})
    assert ok(env, "modify_user_address", user_id="omar_silva_7446", **ADDRESS)["address"] == ADDRESS
    assert env.agent.db["orders"][PENDING]["address"] != ADDRESS  # orders keep their address


def test_return_delivered_order_items(env):
    args = dict(order_id=DELIVERED, item_ids=[D_ITEM], payment_method_id=D_GIFT)
    fails(env, "return_delivered_order_items", "Order not found", **{**args, "order_id": "#W0"})
    fails(env, "return_delivered_order_items", "Non-delivered order cannot be returned", **{**args, "order_id": PENDING})
    fails(env, "return_delivered_order_items", "Payment method not found", **{**args, "payment_method_id": "x"})
    fails(env, "return_delivered_order_items", "Payment method should be the original payment method",
          **{**args, "payment_method_id": D_PAYPAL})
    fails(env, "return_delivered_order_items", "Some item not found", **{**args, "item_ids": [D_ITEM, D_ITEM]})
    order = ok(env, "return_delivered_order_items", **{**args, "item_ids": ["3877338112", D_ITEM]})
    assert order["status"] == "return requested" and order["return_items"] == sorted(["3877338112", D_ITEM])
    assert order["return_payment_method_id"] == D_GIFT and len(order["payment_history"]) == 1


def test_read_tools(env):
    assert call(env, "find_user_id_by_email", email="NOAH.BROWN7922@example.com") == ("noah_brown_6181", False)
    assert call(env, "find_user_id_by_name_zip", first_name="noah", last_name="BROWN", zip="80279") == \
        ("noah_brown_6181", False)
    fails(env, "find_user_id_by_email", "User not found", email="nobody@example.com")
    fails(env, "find_user_id_by_name_zip", "User not found", first_name="noah", last_name="brown", zip="00000")
    fails(env, "get_order_details", "Order not found", order_id="W2611340")
    order = ok(env, "get_order_details", order_id=PROCESSED)
    assert order["status"] == "processed" and [i["price"] for i in order["items"]] == [47.84, 488.81]
    assert all(order[k] is None for k in ("cancel_reason", "exchange_items", "return_payment_method_id"))
    fails(env, "get_product_details", "Product not found", product_id=P_ITEM)
    types = call(env, "list_all_product_types")[0]
    assert types.startswith('{"Action Camera": "3377618313", "Air Purifier": "3821016478"')
    assert len(json.loads(types)) == 50
    fails(env, "get_user_details", "User not found", user_id="x")


def test_exchange_of_no_items_stores_an_integer_zero(env):
    # An empty exchange leaves upstream's sum at the integer 0, so its state holds 0, not 0.0.
    order = ok(env, "exchange_delivered_order_items", order_id=DELIVERED, item_ids=[], new_item_ids=[],
               payment_method_id=D_PAYPAL)
    assert order["status"] == "exchange requested" and order["exchange_items"] == []
    assert type(order["exchange_price_difference"]) is int and order["exchange_price_difference"] == 0
    assert env.fingerprints()[0] == "69224898301a"  # upstream's
