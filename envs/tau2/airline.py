"""The τ² airline domain: flights, users and reservations, with 14 agent tools.

Behaviour follows upstream τ²-bench's airline domain, including its quirks
(cancellation releases no seats, flight changes never touch inventory, the one-stop search
date without zero padding, ...), because the tasks' gold states depend on them. The tools
enforce only mechanical checks; policy compliance is judged through the final DB state.
Fixed "now" and deterministic ids make every episode reproducible.
"""

from __future__ import annotations

from envs.base import ToolError
from envs.tau2.toolkit import Toolkit, check_literal, make_record, make_records, tool

NOW = "2024-05-15T15:00:00"
RESERVATION_IDS = ("HATHAT", "HATHAU", "HATHAV")
CERTIFICATE_IDS = ("certificate_3221322", "certificate_3221323", "certificate_3221324")
CABINS = ("basic_economy", "economy", "business")
AIRPORTS = (("SFO", "San Francisco"), ("JFK", "New York"), ("LAX", "Los Angeles"), ("ORD", "Chicago"),
            ("DFW", "Dallas"), ("DEN", "Denver"), ("SEA", "Seattle"), ("ATL", "Atlanta"), ("MIA", "Miami"),
            ("BOS", "Boston"), ("PHX", "Phoenix"), ("IAH", "Houston"), ("LAS", "Las Vegas"), ("MCO", "Orlando"),
            ("EWR", "Newark"), ("CLT", "Charlotte"), ("MSP", "Minneapolis"), ("DTW", "Detroit"),
            ("PHL", "Philadelphia"), ("LGA", "LaGuardia"))

FLIGHT_INFO = {"flight_number": "str", "date": "str"}
PASSENGER = {"first_name": "str", "last_name": "str", "dob": "str"}
PAYMENT = {"payment_id": "str", "amount": "int"}
RESERVATION_FIELDS = {"origin": "str", "destination": "str", "total_baggages": "int", "nonfree_baggages": "int"}
_FLIGHT_FIELDS = ("flight_number", "origin", "destination", "scheduled_departure_time_est",
                  "scheduled_arrival_time_est", "dates")
_SEGMENT_FIELDS = ("flight_number", "origin", "destination", "date", "price")

_FLIGHTS_ARG = ({"type": "array", "items": {"type": "object", "properties": {
    "flight_number": {"type": "string"}, "date": {"type": "string", "description": "YYYY-MM-DD"}},
    "required": ["flight_number", "date"]}}, "Every flight segment of the itinerary, each with flight_number and date.")
_PASSENGERS_ARG = ({"type": "array", "items": {"type": "object", "properties": {
    "first_name": {"type": "string"}, "last_name": {"type": "string"}, "dob": {"type": "string", "description": "YYYY-MM-DD"}},
    "required": ["first_name", "last_name", "dob"]}}, "The passengers, each with first_name, last_name and dob.")
_PAYMENTS_ARG = ({"type": "array", "items": {"type": "object", "properties": {
    "payment_id": {"type": "string"}, "amount": {"type": "integer"}}, "required": ["payment_id", "amount"]}},
    "The payment methods and the amount charged to each; the amounts must add up to the total price.")
_CABIN_ARG = ({"type": "string", "enum": list(CABINS)}, "The cabin class.")


def normalise_db(db: dict) -> dict:
    """Put the loaded JSON into canonical form: model field order and explicit nulls."""
    db["flights"] = {k: {f: v[f] for f in _FLIGHT_FIELDS} for k, v in db["flights"].items()}
    for res in db["reservations"].values():
        res["flights"] = [{f: seg[f] for f in _SEGMENT_FIELDS} for seg in res["flights"]]
        res.setdefault("status", None)
    for user in db["users"].values():
        user["address"].setdefault("address2", None)
    return db


def _matches(value: str, wanted) -> bool:
    """A search criterion: upstream treats a null origin or destination as any airport."""
    return wanted is None or value == wanted


class AirlineTools(Toolkit):
    TOOL_ORDER = ("book_reservation", "calculate", "cancel_reservation", "get_reservation_details",
                  "get_user_details", "list_all_airports", "search_direct_flight", "search_onestop_flight",
                  "send_certificate", "transfer_to_human_agents", "update_reservation_baggages",
                  "update_reservation_flights", "update_reservation_passengers", "get_flight_status")

    # ---- lookups (upstream's exact error texts) -----------------------------------------
    def _user(self, user_id):
        if user_id not in self.db["users"]:
            raise ToolError(f"User {user_id} not found")
        return self.db["users"][user_id]

    def _reservation(self, reservation_id):
        if reservation_id not in self.db["reservations"]:
            raise ToolError(f"Reservation {reservation_id} not found")
        return self.db["reservations"][reservation_id]

    def _flight(self, flight_number):
        if flight_number not in self.db["flights"]:
            raise ToolError(f"Flight {flight_number} not found")
        return self.db["flights"][flight_number]

    def _instance(self, flight_number, date):
        flight = self._flight(flight_number)
        if date not in flight["dates"]:
            raise ToolError(f"Flight {flight_number} not found on date {date}")
        return flight["dates"][date]

    def _bookable_segment(self, info: dict, cabin, passengers: int) -> dict:
        """Check a flight instance can take the passengers; the segment at today's price."""
        flight = self._flight(info["flight_number"])
        inst = self._instance(info["flight_number"], info["date"])
        if inst["status"] != "available":
            raise ToolError(f"Flight {info['flight_number']} not available on date {info['date']}")
        if inst["available_seats"][cabin] < passengers:  # an unknown cabin is a KeyError: 'first'
            raise ToolError(f"Not enough seats on flight {info['flight_number']}")
        return {"flight_number": info["flight_number"], "origin": flight["origin"],
                "destination": flight["destination"], "date": info["date"], "price": inst["prices"][cabin]}

    def _pay_for_update(self, user: dict, payment_id, price: int) -> dict | None:
        """Charge (or refund, if negative) an update, as upstream's update tools do."""
        methods = user["payment_methods"]
        if payment_id not in methods:
            raise ToolError("Payment method not found")
        method = methods[payment_id]
        if method["source"] == "certificate":
            raise ToolError("Certificate cannot be used to update reservation")
        if method["source"] == "gift_card":
            if method["amount"] < price:
                raise ToolError("Gift card balance is not enough")
            method["amount"] = method["amount"] - price
        if price == 0:
            return None
        # Fractional bag counts give a float price. Upstream's payment record holds an int: a
        # whole price is stored as one, a fractional one fails the call, after the gift card
        # above was charged (reproduced, as the DB check sees that balance).
        if isinstance(price, float) and not price.is_integer():
            raise ToolError(f"Payment amount {price} is not a whole number of dollars")
        return {"payment_id": payment_id, "amount": int(price)}

    # ---- tools ------------------------------------------------------------------------------
    @tool("write", "Book a reservation for a user and charge the given payment methods.",
          user_id=("string", "The user's id, e.g. 'sara_doe_496'."),
          origin=("string", "IATA code of the trip's origin, e.g. 'SFO'."),
          destination=("string", "IATA code of the trip's destination, e.g. 'JFK'."),
          flight_type=({"type": "string", "enum": ["one_way", "round_trip"]}, "One way or round trip."),
          cabin=_CABIN_ARG, flights=_FLIGHTS_ARG, passengers=_PASSENGERS_ARG, payment_methods=_PAYMENTS_ARG,
          total_baggages=("integer", "Total number of bags."),
          nonfree_baggages=("integer", "Number of paid bags."),
          insurance=({"type": "string", "enum": ["yes", "no"]}, "Whether travel insurance is bought."))
    def book_reservation(self, user_id, origin, destination, flight_type, cabin, flights, passengers,
                         payment_methods, total_baggages, nonfree_baggages, insurance):
        flights = make_records("FlightInfo", flights, FLIGHT_INFO)
        passengers = make_records("Passenger", passengers, PASSENGER)
        payments = make_records("Payment", payment_methods, PAYMENT)
        user = self._user(user_id)
        reservation_id = next((r for r in RESERVATION_IDS if r not in self.db["reservations"]), None)
        if reservation_id is None:
            raise ToolError("Too many reservations")
        fields = make_record("Reservation", {"origin": origin, "destination": destination, "total_baggages":
                             total_baggages, "nonfree_baggages": nonfree_baggages}, RESERVATION_FIELDS)
        reservation = {
            "reservation_id": reservation_id, "user_id": user_id, "origin": fields["origin"],
            "destination": fields["destination"],
            "flight_type": check_literal("flight_type", flight_type, ("one_way", "round_trip")),
            "cabin": check_literal("cabin", cabin, CABINS), "flights": [], "passengers": passengers,
            "payment_history": payments, "created_at": NOW, "total_baggages": fields["total_baggages"],
            "nonfree_baggages": fields["nonfree_baggages"],
            "insurance": check_literal("insurance", insurance, ("yes", "no")), "status": None,
        }
        if isinstance(nonfree_baggages, str):
            # Upstream's record accepts a numeric string, but its price adds the raw argument
            # (50 * "1" is a string), so the booking fails there; it fails here too.
            raise ToolError(f"nonfree_baggages must be a number, not the string {nonfree_baggages!r}")
        n = len(passengers)
        total = 0
        for info in flights:
            segment = self._bookable_segment(info, cabin, n)
            reservation["flights"].append(segment)
            total += segment["price"] * n
        if insurance == "yes":
            total += 30 * n
        total += 50 * reservation["nonfree_baggages"]
        for pay in payments:  # each entry is checked against the unchanged balance
            method = user["payment_methods"].get(pay["payment_id"])
            if method is None:
                raise ToolError(f"Payment method {pay['payment_id']} not found")
            if method["source"] in ("gift_card", "certificate") and method["amount"] < pay["amount"]:
                raise ToolError(f"Not enough balance in payment method {pay['payment_id']}")
        paid = sum(p["amount"] for p in payments)
        if paid != total:
            raise ToolError(f"Payment amount does not add up, total price is {total}, but paid {paid}")
        for pay in payments:
            method = user["payment_methods"][pay["payment_id"]]  # KeyError if a certificate repeats
            if method["source"] == "gift_card":
                method["amount"] = method["amount"] - pay["amount"]
            elif method["source"] == "certificate":
                del user["payment_methods"][pay["payment_id"]]  # used up whatever the amount
        for segment in reservation["flights"]:
            self._instance(segment["flight_number"], segment["date"])["available_seats"][cabin] -= n
        self.db["reservations"][reservation_id] = reservation
        user["reservations"].append(reservation_id)
        return reservation

    @tool("write", "Cancel the whole reservation; refunds are recorded against the original payments.",
          reservation_id=("string", "The reservation id, e.g. 'ZFA04Y'."))
    def cancel_reservation(self, reservation_id):
        reservation = self._reservation(reservation_id)
        refunds = [{"payment_id": p["payment_id"], "amount": -p["amount"]} for p in reservation["payment_history"]]
        reservation["payment_history"].extend(refunds)
        reservation["status"] = "cancelled"
        return reservation

    @tool("read", "Get the details of a reservation.", reservation_id=("string", "The reservation id, e.g. '8JX2WO'."))
    def get_reservation_details(self, reservation_id):
        return self._reservation(reservation_id)

    @tool("read", "Get a user's profile, including payment methods and reservation ids.",
          user_id=("string", "The user's id, e.g. 'sara_doe_496'."))
    def get_user_details(self, user_id):
        return self._user(user_id)

    @tool("read", "List all airports (IATA code and city).")
    def list_all_airports(self):
        return [{"iata": code, "city": city} for code, city in AIRPORTS]

    @tool("read", "Search direct flights between two airports on a date.",
          origin=("string", "IATA code of the origin, e.g. 'JFK'."),
          destination=("string", "IATA code of the destination, e.g. 'LAX'."),
          date=("string", "The date, YYYY-MM-DD."))
    def search_direct_flight(self, origin, destination, date):
        return [self._direct(f, date, None) for f in self.db["flights"].values()
                if _matches(f["origin"], origin) and _matches(f["destination"], destination)
                and f["dates"].get(date, {}).get("status") == "available"]

    @staticmethod
    def _direct(flight: dict, date: str, shown_date):
        inst = flight["dates"][date]
        return {"flight_number": flight["flight_number"], "origin": flight["origin"],
                "destination": flight["destination"], "status": "available",
                "scheduled_departure_time_est": flight["scheduled_departure_time_est"],
                "scheduled_arrival_time_est": flight["scheduled_arrival_time_est"], "date": shown_date,
                "available_seats": inst["available_seats"], "prices": inst["prices"]}

    @tool("read", "Search one-stop itineraries (two flights via a connecting airport) between two airports.",
          origin=("string", "IATA code of the origin, e.g. 'JFK'."),
          destination=("string", "IATA code of the destination, e.g. 'LAX'."),
          date=("string", "The departure date, YYYY-MM-DD."))
    def search_onestop_flight(self, origin, destination, date):
        flights = self.db["flights"].values()

        def available(f, d):
            return f["dates"].get(d, {}).get("status") == "available"

        out = []
        for first in flights:
            if not _matches(first["origin"], origin) or not available(first, date):
                continue
            date2 = date
            if "+1" in first["scheduled_arrival_time_est"]:
                # Quirk reproduced: no zero padding, so 2024-05-05 -> 2024-05-6 (no flights).
                date2 = "2024-05-" + str(int(date[-2:]) + 1)
            for second in flights:
                if (second["origin"] == first["destination"] and _matches(second["destination"], destination)
                        and available(second, date2)
                        and second["scheduled_departure_time_est"] >= first["scheduled_arrival_time_est"]):
                    out.append([self._direct(first, date, date), self._direct(second, date2, date2)])
        return out

    @tool("write", "Send a travel certificate of the given amount to a user (compensation).",
          user_id=("string", "The user's id, e.g. 'sara_doe_496'."),
          amount=("integer", "The certificate amount in dollars."))
    def send_certificate(self, user_id, amount):
        user = self._user(user_id)
        cert_id = next((c for c in CERTIFICATE_IDS if c not in user["payment_methods"]), None)
        if cert_id is None:
            raise ToolError("Too many certificates")
        user["payment_methods"][cert_id] = {"source": "certificate", "id": cert_id, "amount": float(amount)}
        return f"Certificate {cert_id} added to user {user_id} with amount {amount}."

    @tool("write", "Update the baggage counts of a reservation, charging added paid bags.",
          reservation_id=("string", "The reservation id."),
          total_baggages=("integer", "The new total number of bags."),
          nonfree_baggages=("integer", "The new number of paid bags."),
          payment_id=("string", "The payment method id on the user's profile, e.g. 'credit_card_7815826'."))
    def update_reservation_baggages(self, reservation_id, total_baggages, nonfree_baggages, payment_id):
        reservation = self._reservation(reservation_id)
        user = self._user(reservation["user_id"])
        price = 50 * max(0, nonfree_baggages - reservation["nonfree_baggages"])
        record = self._pay_for_update(user, payment_id, price)  # runs even when free
        if record is not None:
            reservation["payment_history"].append(record)
        reservation["total_baggages"] = total_baggages
        reservation["nonfree_baggages"] = nonfree_baggages
        return reservation

    @tool("write", "Replace the flights and/or cabin of a reservation, charging or refunding the fare difference.",
          reservation_id=("string", "The reservation id."), cabin=_CABIN_ARG,
          flights=(_FLIGHTS_ARG[0], "The entire new itinerary, including unchanged segments."),
          payment_id=("string", "The payment method id on the user's profile."))
    def update_reservation_flights(self, reservation_id, cabin, flights, payment_id):
        flights = make_records("FlightInfo", flights, FLIGHT_INFO)
        reservation = self._reservation(reservation_id)
        user = self._user(reservation["user_id"])
        n = len(reservation["passengers"])
        new_segments, new_total = [], 0
        for info in flights:
            kept = None
            if cabin == reservation["cabin"]:
                kept = next((dict(s) for s in reservation["flights"]
                             if s["flight_number"] == info["flight_number"] and s["date"] == info["date"]), None)
            segment = kept or self._bookable_segment(info, cabin, n)
            new_segments.append(segment)
            new_total += segment["price"] * n
        difference = new_total - sum(s["price"] for s in reservation["flights"]) * n
        record = self._pay_for_update(user, payment_id, difference)
        if record is not None:
            reservation["payment_history"].append(record)
        reservation["flights"] = new_segments
        reservation["cabin"] = cabin
        return reservation

    @tool("write", "Replace the passenger details of a reservation (the number of passengers cannot change).",
          reservation_id=("string", "The reservation id."), passengers=_PASSENGERS_ARG)
    def update_reservation_passengers(self, reservation_id, passengers):
        passengers = make_records("Passenger", passengers, PASSENGER)
        reservation = self._reservation(reservation_id)
        if len(passengers) != len(reservation["passengers"]):
            raise ToolError("Number of passengers does not match")
        reservation["passengers"] = passengers
        return reservation

    @tool("read", "Get the status of a flight on a date.",
          flight_number=("string", "The flight number, e.g. 'HAT001'."), date=("string", "The date, YYYY-MM-DD."))
    def get_flight_status(self, flight_number, date):
        return self._instance(flight_number, date)["status"]
