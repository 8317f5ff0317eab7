"""Airline tools: every error branch of the write tools, and spot checks."""

import json

import pytest

from envs.tau2.data import Tau2Data
from envs.tau2.domains import build_environment
from tests.unit.tau2_testdata import DATA_DIR, needs_data

pytestmark = needs_data

USER = "mei_hernandez_8984"  # gift card 98.0, two certificates of 250.0, two credit cards
GIFT, CERT, CARD = "gift_card_5309492", "certificate_7502997", "credit_card_2140654"
PAX = {"first_name": "Mei", "last_name": "Hernandez", "dob": "1981-01-01"}
JFK_SEA = [{"flight_number": "HAT069", "date": "2024-05-20"}]  # economy 121 (12 seats), business 239 (3 seats)


@pytest.fixture
def env():
    return build_environment(Tau2Data(DATA_DIR), "airline")


def call(env, name, **arguments):
    msg = env.execute({"id": "t", "name": name, "arguments": arguments})
    return msg["content"], msg["error"]


def fails(env, name, needle, **arguments):
    """The call errs with ``needle`` in its message and leaves the DB untouched."""
    before = env.fingerprints()
    content, error = call(env, name, **arguments)
    assert error and content.startswith("Error: ") and needle in content, content
    assert env.fingerprints() == before


def booking(**overrides):
    args = dict(user_id=USER, origin="JFK", destination="SEA", flight_type="one_way", cabin="economy",
                flights=JFK_SEA, passengers=[PAX], payment_methods=[{"payment_id": CARD, "amount": 121}],
                total_baggages=0, nonfree_baggages=0, insurance="no")
    args.update(overrides)
    return args


def test_book_reservation_error_branches(env):
    fails(env, "book_reservation", "Field required", **booking(flights=[{"flight_number": "HAT069"}]))
    fails(env, "book_reservation", "valid int", **booking(payment_methods=[{"payment_id": CARD, "amount": 120.5}]))
    fails(env, "book_reservation", "User nobody_1 not found", **booking(user_id="nobody_1"))
    fails(env, "book_reservation", "cabin", **booking(cabin="first"))
    fails(env, "book_reservation", "flight_type", **booking(flight_type="multi_city"))
    fails(env, "book_reservation", "insurance", **booking(insurance="maybe"))
    fails(env, "book_reservation", "nonfree_baggages", **booking(nonfree_baggages="one"))
    fails(env, "book_reservation", "Flight HAT999 not found", **booking(flights=[{"flight_number": "HAT999", "date": "2024-05-20"}]))
    fails(env, "book_reservation", "Flight HAT069 not found on date 2024-06-20",
          **booking(flights=[{"flight_number": "HAT069", "date": "2024-06-20"}]))
    fails(env, "book_reservation", "Flight HAT069 not available on date 2024-05-15",
          **booking(flights=[{"flight_number": "HAT069", "date": "2024-05-15"}]))
    fails(env, "book_reservation", "Not enough seats on flight HAT069", **booking(cabin="business", passengers=[PAX] * 4))
    fails(env, "book_reservation", "Payment method credit_card_1 not found",
          **booking(payment_methods=[{"payment_id": "credit_card_1", "amount": 121}]))
    fails(env, "book_reservation", f"Not enough balance in payment method {GIFT}",
          **booking(payment_methods=[{"payment_id": GIFT, "amount": 121}]))
    fails(env, "book_reservation", "Payment amount does not add up, total price is 201, but paid 121",
          **booking(insurance="yes", nonfree_baggages=1))
    fails(env, "book_reservation", "missing 1 required positional argument", **{
        k: v for k, v in booking().items() if k != "insurance"})
    fails(env, "book_reservation", "unexpected keyword argument", **booking(seat="12A"))


def test_book_reservation_applies_payments_and_seats(env):
    content, error = call(env, "book_reservation", **booking(
        insurance="yes", nonfree_baggages=1, total_baggages=2,
        payment_methods=[{"payment_id": CERT, "amount": 100.0}, {"payment_id": GIFT, "amount": 98},
                         {"payment_id": CARD, "amount": 3}]))
    assert not error
    res = json.loads(content)
    assert res["reservation_id"] == "HATHAT" and res["created_at"] == "2024-05-15T15:00:00" and res["status"] is None
    assert res["flights"] == [{"flight_number": "HAT069", "origin": "JFK", "destination": "SEA",
                               "date": "2024-05-20", "price": 121}]
    assert res["payment_history"][0] == {"payment_id": CERT, "amount": 100}  # 100.0 stored as an int
    user = env.agent.db["users"][USER]
    assert CERT not in user["payment_methods"]  # a certificate is used up whatever the amount
    assert user["payment_methods"][GIFT]["amount"] == 0.0
    assert user["reservations"][-1] == "HATHAT"
    assert env.agent.db["flights"]["HAT069"]["dates"]["2024-05-20"]["available_seats"]["economy"] == 11
    assert json.loads(call(env, "book_reservation", **booking())[0])["reservation_id"] == "HATHAU"
    assert json.loads(call(env, "book_reservation", **booking())[0])["reservation_id"] == "HATHAV"
    fails(env, "book_reservation", "Too many reservations", **booking())


def test_book_reservation_repeated_certificate_is_a_partial_failure(env):
    content, error = call(env, "book_reservation", **booking(
        payment_methods=[{"payment_id": CERT, "amount": 100}, {"payment_id": CERT, "amount": 21}]))
    assert error and content == f"Error: '{CERT}'"
    assert CERT not in env.agent.db["users"][USER]["payment_methods"]  # removed before the failure
    assert "HATHAT" not in env.agent.db["reservations"]


def test_cancel_reservation(env):
    fails(env, "cancel_reservation", "Reservation XXXXXX not found", reservation_id="XXXXXX")
    seats = json.dumps(env.agent.db["flights"]["HAT170"]["dates"]["2024-05-22"])
    res = json.loads(call(env, "cancel_reservation", reservation_id="4WQ150")[0])
    assert res["status"] == "cancelled"
    assert res["payment_history"] == [{"payment_id": "gift_card_3576581", "amount": 4986},
                                      {"payment_id": "gift_card_3576581", "amount": -4986}]
    assert json.dumps(env.agent.db["flights"]["HAT170"]["dates"]["2024-05-22"]) == seats  # no seats released
    again = json.loads(call(env, "cancel_reservation", reservation_id="4WQ150")[0])
    assert len(again["payment_history"]) == 4  # no already-cancelled check (quirk)


def test_send_certificate(env):
    fails(env, "send_certificate", "User nobody_1 not found", user_id="nobody_1", amount=100)
    assert call(env, "send_certificate", user_id="mia_li_3668", amount=100)[0] == \
        "Certificate certificate_3221322 added to user mia_li_3668 with amount 100."
    assert env.agent.db["users"]["mia_li_3668"]["payment_methods"]["certificate_3221322"]["amount"] == 100.0
    call(env, "send_certificate", user_id="mia_li_3668", amount=5)
    call(env, "send_certificate", user_id="mia_li_3668", amount=5)
    fails(env, "send_certificate", "Too many certificates", user_id="mia_li_3668", amount=5)


def reservation_of(env, user_id=USER):
    return env.agent.db["users"][user_id]["reservations"][0]


def test_update_reservation_baggages(env):
    rid = reservation_of(env)
    res = env.agent.db["reservations"][rid]
    bags = dict(reservation_id=rid, total_baggages=res["total_baggages"] + 1,
                nonfree_baggages=res["nonfree_baggages"] + 1)
    fails(env, "update_reservation_baggages", "Reservation NOPE00 not found", **{**bags, "reservation_id": "NOPE00"},
          payment_id=CARD)
    fails(env, "update_reservation_baggages", "Payment method not found", **bags, payment_id="credit_card_1")
    fails(env, "update_reservation_baggages", "Certificate cannot be used to update reservation",
          **{**bags, "nonfree_baggages": res["nonfree_baggages"]}, payment_id=CERT)  # even when free
    fails(env, "update_reservation_baggages", "Gift card balance is not enough",
          **{**bags, "nonfree_baggages": res["nonfree_baggages"] + 2}, payment_id=GIFT)
    content, error = call(env, "update_reservation_baggages", **bags, payment_id=GIFT)
    assert not error and json.loads(content)["payment_history"][-1] == {"payment_id": GIFT, "amount": 50}
    assert env.agent.db["users"][USER]["payment_methods"][GIFT]["amount"] == 48.0
    env.agent.db["reservations"][rid]["user_id"] = "ghost_1"
    fails(env, "update_reservation_baggages", "User ghost_1 not found", **bags, payment_id=GIFT)


def test_update_reservation_flights(env):
    rid = "4WQ150"  # business, DFW-LAX-DFW, three passengers, owner chen_jackson_3290
    owner_card = "gift_card_3576581"  # the owner's only payment method (245.0)
    same = [{"flight_number": "HAT170", "date": "2024-05-22"}, {"flight_number": "HAT022", "date": "2024-05-26"}]
    fails(env, "update_reservation_flights", "Field required", reservation_id=rid, cabin="business",
          flights=[{"date": "2024-05-22"}], payment_id=owner_card)
    fails(env, "update_reservation_flights", "Reservation NOPE00 not found", reservation_id="NOPE00",
          cabin="business", flights=same, payment_id=owner_card)
    fails(env, "update_reservation_flights", "Flight HAT069 not available on date 2024-05-15", reservation_id=rid,
          cabin="business", flights=[{"flight_number": "HAT069", "date": "2024-05-15"}], payment_id=owner_card)
    fails(env, "update_reservation_flights", "Not enough seats on flight HAT002", reservation_id=rid,
          cabin="business", flights=[{"flight_number": "HAT002", "date": "2024-05-25"}], payment_id=owner_card)
    fails(env, "update_reservation_flights", "'first'", reservation_id=rid, cabin="first", flights=same,
          payment_id=owner_card)
    fails(env, "update_reservation_flights", "Payment method not found", reservation_id=rid, cabin="economy",
          flights=same, payment_id="credit_card_1")
    fails(env, "update_reservation_flights", "Gift card balance is not enough", reservation_id="R9QDGB",
          cabin="business", flights=[{"flight_number": f, "date": d} for f, d in (
              ("HAT034", "2024-05-28"), ("HAT026", "2024-05-28"), ("HAT247", "2024-05-30"), ("HAT232", "2024-05-30"))],
          payment_id=GIFT)
    # Same cabin, same segments: kept at their old prices with no availability check; nothing charged.
    content, error = call(env, "update_reservation_flights", reservation_id=rid, cabin="business", flights=same,
                          payment_id=owner_card)
    assert not error and len(json.loads(content)["payment_history"]) == 1
    # A cabin change re-prices every segment and records the (negative) difference.
    seats = json.dumps(env.agent.db["flights"]["HAT170"]["dates"]["2024-05-22"])
    res = json.loads(call(env, "update_reservation_flights", reservation_id=rid, cabin="economy", flights=same,
                          payment_id=owner_card)[0])
    new_total = sum(s["price"] for s in res["flights"]) * 3
    assert res["cabin"] == "economy" and res["payment_history"][-1] == {"payment_id": owner_card,
                                                                         "amount": new_total - (883 + 779) * 3}
    assert json.dumps(env.agent.db["flights"]["HAT170"]["dates"]["2024-05-22"]) == seats  # inventory untouched


def test_update_reservation_flights_certificate_and_refund(env):
    rid = "R9QDGB"  # economy, four segments, three passengers, paid by credit card
    res = env.agent.db["reservations"][rid]
    flights = [{"flight_number": s["flight_number"], "date": s["date"]} for s in res["flights"]]
    fails(env, "update_reservation_flights", "Certificate cannot be used to update reservation",
          reservation_id=rid, cabin="economy", flights=flights, payment_id=CERT)  # even when free
    dates = env.agent.db["flights"]
    cheaper = sum(dates[f["flight_number"]]["dates"][f["date"]]["prices"]["basic_economy"] for f in flights) * 3
    difference = cheaper - (143 + 194 + 126 + 144) * 3
    assert difference < 0
    content, error = call(env, "update_reservation_flights", reservation_id=rid, cabin="basic_economy",
                          flights=flights, payment_id=GIFT)
    assert not error and json.loads(content)["payment_history"][-1] == {"payment_id": GIFT, "amount": difference}
    assert env.agent.db["users"][USER]["payment_methods"][GIFT]["amount"] == 98.0 - difference  # refund credited


def test_update_reservation_passengers(env):
    fails(env, "update_reservation_passengers", "Reservation NOPE00 not found", reservation_id="NOPE00",
          passengers=[PAX])
    fails(env, "update_reservation_passengers", "Number of passengers does not match", reservation_id="4WQ150",
          passengers=[PAX])
    fails(env, "update_reservation_passengers", "Field required", reservation_id="4WQ150",
          passengers=[{"first_name": "A"}] * 3)
    res = json.loads(call(env, "update_reservation_passengers", reservation_id="4WQ150", passengers=[PAX] * 3)[0])
    assert res["passengers"] == [PAX] * 3


def test_read_tools_and_generic_tools(env):
    direct = json.loads(call(env, "search_direct_flight", origin="JFK", destination="SEA", date="2024-05-20")[0])
    assert [(f["flight_number"], f["date"], f["prices"]["economy"]) for f in direct] == [("HAT069", None, 121),
                                                                                         ("HAT083", None, 100)]
    onestop = json.loads(call(env, "search_onestop_flight", origin="JFK", destination="SEA", date="2024-05-20")[0])
    assert len(onestop) == 4 and [onestop[0][0]["flight_number"], onestop[0][1]["flight_number"]] == ["HAT057", "HAT039"]
    assert onestop[0][1]["date"] == "2024-05-20"
    assert call(env, "search_onestop_flight", origin="JFK", destination="SEA", date="2024-05-05")[0] == "[]"
    assert call(env, "get_flight_status", flight_number="HAT001", date="2024-05-01") == ("landed", False)
    fails(env, "get_flight_status", "Flight HAT001 not found on date 2024-04-01", flight_number="HAT001", date="2024-04-01")
    assert len(json.loads(call(env, "list_all_airports")[0])) == 20
    fails(env, "get_user_details", "User x not found", user_id="x")
    assert call(env, "calculate", expression="10/3") == ("3.33", False)
    assert call(env, "calculate", expression="2+2") == ("4.0", False)
    fails(env, "calculate", "Invalid characters in expression", expression="__import__('os')")
    fails(env, "calculate", "division by zero", expression="1/0")
    assert call(env, "calculate", expression="(1+")[1]
    assert call(env, "calculate", expression="2 ** 10 // 3 - -1.5") == ("342.5", False)
    fails(env, "calculate", "Exponent too large", expression="9**9**9")
    fails(env, "calculate", "Exponent too large", expression="((9**999)**999)**999")  # minutes otherwise
    fails(env, "calculate", "Expression too long", expression="1+" * 600 + "1")
    fails(env, "calculate", "too deeply nested", expression="-" * 300 + "1")
    assert call(env, "transfer_to_human_agents", summary="x") == ("Transfer successful", False)
    fails(env, "book_flight", "Tool 'book_flight' not found.")


# ---- argument handling as upstream's typed records and arithmetic treat it ----------------------
def search(env, name, origin, destination, date="2024-05-20"):
    content, error = call(env, name, origin=origin, destination=destination, date=date)
    assert not error, content
    return json.loads(content)


def test_search_with_a_null_airport_means_any_airport(env):
    # Upstream's search skips a null criterion: the result is every airport's, in DB order.
    airports = [a["iata"] for a in json.loads(call(env, "list_all_airports")[0])]

    def each(name, origins, destinations):
        return sorted(json.dumps(f) for o in origins for d in destinations for f in search(env, name, o, d))

    for name in ("search_direct_flight", "search_onestop_flight"):
        to_sea, from_jfk = search(env, name, None, "SEA"), search(env, name, "JFK", None)
        assert to_sea and sorted(map(json.dumps, to_sea)) == each(name, airports, ["SEA"])
        assert from_jfk and sorted(map(json.dumps, from_jfk)) == each(name, ["JFK"], airports)
    assert len({f["origin"] for f in search(env, "search_direct_flight", None, None)}) == len(airports)


def test_book_reservation_nonfree_baggages_as_a_string_fails(env):
    # Upstream's record would read "1" as 1, but its price adds the raw argument and fails.
    fails(env, "book_reservation", "nonfree_baggages",
          **booking(nonfree_baggages="1", payment_methods=[{"payment_id": CARD, "amount": 171}]))
    content, error = call(env, "book_reservation", **booking(total_baggages="2"))  # used by no price
    assert not error and json.loads(content)["total_baggages"] == 2


def test_book_reservation_rejects_a_non_string_origin_or_destination(env):
    for value in (None, 1, ["JFK"]):
        fails(env, "book_reservation", "origin", **booking(origin=value))
        fails(env, "book_reservation", "destination", **booking(destination=value))


def test_bag_counts_given_as_true_count_as_one(env):
    paid = [{"payment_id": CARD, "amount": 171}]  # one paid bag
    content, error = call(env, "book_reservation", **booking(total_baggages=True, nonfree_baggages=True,
                                                             payment_methods=paid))
    assert not error and '"total_baggages": 1, "nonfree_baggages": 1' in content
    with_ints = build_environment(Tau2Data(DATA_DIR), "airline")
    call(with_ints, "book_reservation", **booking(total_baggages=1, nonfree_baggages=1, payment_methods=paid))
    assert env.fingerprints() == with_ints.fingerprints()
    content, error = call(env, "update_reservation_baggages", reservation_id="HATHAT", total_baggages=True,
                          nonfree_baggages=True, payment_id=CARD)  # upstream assigns the value as given
    assert not error and '"total_baggages": true, "nonfree_baggages": true' in content


def test_fractional_bag_counts(env):
    fails(env, "book_reservation", "nonfree_baggages", **booking(nonfree_baggages=1.5))
    rid = reservation_of(env)  # no bags yet
    # Upstream keeps the counts as given but stores the charge in an int payment record.
    content, error = call(env, "update_reservation_baggages", reservation_id=rid, total_baggages=1,
                          nonfree_baggages=1.0, payment_id=CARD)
    assert not error and json.loads(content)["payment_history"][-1] == {"payment_id": CARD, "amount": 50}
    assert '"total_baggages": 1, "nonfree_baggages": 1.0' in content
    assert env.fingerprints()[0] == "c5b8cd0db457"  # upstream's
    # A fractional charge fails there, after a gift card has paid it.
    before = json.dumps(env.agent.db["reservations"][rid])
    content, error = call(env, "update_reservation_baggages", reservation_id=rid, total_baggages=1.01,
                          nonfree_baggages=1.01, payment_id=GIFT)
    assert error and "whole number" in content
    assert json.dumps(env.agent.db["reservations"][rid]) == before
    assert env.agent.db["users"][USER]["payment_methods"][GIFT]["amount"] == pytest.approx(98.0 - 0.5)
