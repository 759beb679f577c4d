"""Whose turn it is to place on free nodes (controller/turns.py)."""

from __future__ import annotations

from computedomains.controller import turns
from computedomains.controller.turns import Activity, ClaimState, State

A, B = "uid-a", "uid-b"
IDLE = Activity(waiting=0, allocated=0)


def _run(state: State, steps: list[tuple[float, dict[str, Activity]]]) -> list[str]:
    seen = []
    for now, domains in steps:
        state = turns.step(state, domains, now)
        seen.append(state.turn)
    return seen


def test_the_one_domain_placing_gets_the_turn_at_once_and_keeps_it_while_idle() -> None:
    state = State(turn="", active_at={}, allocated={})
    # A appears (its pods follow): its turn; its claims wait, then are allocated; all idle.
    assert _run(state, [
        (0.0, {A: IDLE}),
        (1.0, {A: Activity(waiting=18, allocated=0)}),
        (2.0, {A: Activity(waiting=0, allocated=18)}),
        (60.0, {A: Activity(waiting=0, allocated=18)}),
    ]) == [A, A, A, A]  # fmt: skip


def test_a_second_domain_placing_ends_the_turn_and_a_settled_one_gets_it_back() -> None:
    state = turns.step(State(), {A: Activity(waiting=3, allocated=0)}, 0.0)
    assert state.turn == A
    # B appears while A still waits for nodes: a race is possible, binding conditions decide.
    before, state = state, turns.step(state, {A: Activity(3, 0), B: IDLE}, 1.0)
    assert state.turn == "" and state.ended_at == 1.0
    assert turns.ended(before, state)
    assert turns.settling(state, 2.0) == turns.SETTLE - 1.0
    # Both keep placing: nobody's turn.
    state = turns.step(state, {A: Activity(0, 3), B: Activity(2, 0)}, 2.0)
    assert state.turn == ""
    # A has been idle for the window, B still places: B's turn, once settled.
    state = turns.step(state, {A: Activity(0, 3), B: Activity(1, 1)}, 2.0 + turns.WINDOW)
    assert state.turn == B
    assert turns.settling(state, 2.0 + turns.WINDOW) == 0.0


def test_the_turn_waits_for_the_settle_after_a_race() -> None:
    state = State(turn="", ended_at=10.0, active_at={A: 0.0}, allocated={A: 1})
    # A alone places again 1 s after a turn ended: not yet (allocations may be in flight).
    state = turns.step(state, {A: Activity(1, 1)}, 11.0)
    assert state.turn == ""
    state = turns.step(state, {A: Activity(1, 1)}, 10.0 + turns.SETTLE)
    assert state.turn == A


def test_the_turn_moves_from_an_idle_domain_to_the_new_one_at_once_and_the_binder_settles() -> None:
    state = turns.step(State(), {A: Activity(0, 2)}, 0.0)
    assert state.turn == A
    later = turns.WINDOW + 1.0
    state = turns.step(state, {A: Activity(0, 2), B: IDLE}, later)
    assert state.turn == B and state.ended_at == later


def test_a_new_allocation_counts_as_placing_and_a_gone_domain_loses_the_turn() -> None:
    state = turns.step(State(), {A: Activity(0, 1)}, 0.0)
    state = turns.step(state, {A: Activity(0, 1), B: Activity(0, 1)}, turns.WINDOW + 1)
    assert state.turn == B
    # A's count of allocations moved (a pod of it was placed): A places again, a race.
    state = turns.step(state, {A: Activity(0, 2), B: Activity(0, 1)}, turns.WINDOW + 2)
    assert state.turn == ""
    assert turns.placing(state, turns.WINDOW + 2) == {A, B}
    # Nobody places any more: nobody's turn still (it moves only to a domain that places).
    state = turns.step(state, {A: Activity(0, 2), B: Activity(0, 1)}, 3 * turns.WINDOW)
    assert state.turn == ""
    # B is deleted (gone from the live domains) and A places again alone: A's turn.
    state = turns.step(state, {A: Activity(1, 2)}, 3 * turns.WINDOW + 1)
    assert state.turn == A
    # ... and is deleted a second later, a claim still waiting: its turn ends with a settle.
    state = turns.step(state, {}, 3 * turns.WINDOW + 2)
    assert state.turn == "" and turns.settling(state, 3 * turns.WINDOW + 2) == turns.SETTLE


def test_a_gone_domains_turn_goes_to_the_next_domain_without_a_settle() -> None:
    state = turns.step(State(), {A: Activity(18, 0)}, 0.0)
    state = turns.step(state, {A: Activity(0, 18)}, 10.0)
    assert state.turn == A
    # A is deleted once formed, nobody places: nobody's turn, and nothing of A to settle.
    gone_at = 10.0 + turns.WINDOW + 1
    before, state = state, turns.step(state, {}, gone_at)
    assert state.turn == "" and turns.settling(state, gone_at) == 0.0
    assert not turns.ended(before, state)
    # B appears a moment later (a new job): its turn at once, its pods skip the PreBind poll.
    state = turns.step(state, {B: IDLE}, gone_at + 0.5)
    assert state.turn == B


def test_a_domain_placing_as_the_turns_domain_goes_gets_it_at_once() -> None:
    state = turns.step(State(), {A: Activity(0, 18)}, 0.0)
    # In one step A is gone and B places: from A (nothing of it in flight) straight to B.
    state = turns.step(state, {B: Activity(18, 0)}, turns.WINDOW + 1)
    assert state.turn == B and turns.settling(state, turns.WINDOW + 1) == 0.0
    # A gone while two others place: nobody's turn (their race is the binding conditions').
    state = turns.step(State(turn=A, active_at={A: 0.0}), {B: IDLE, "uid-c": IDLE}, 1.0)
    assert state.turn == ""


def test_activity_counts_waiting_and_allocated_claims_per_domain() -> None:
    found = turns.activity([
        ClaimState(A, allocated=False, waiting=True),
        ClaimState(A, allocated=True, waiting=False),
        ClaimState(A, allocated=True, waiting=True),  # its node not labelled yet
        ClaimState(B, allocated=False, waiting=True, tolerant=False),
        ClaimState("", allocated=False, waiting=True),
    ])  # fmt: skip
    assert found == {
        A: Activity(waiting=2, allocated=2),
        B: Activity(waiting=1, allocated=0, tolerant=False),
    }


def test_no_turn_while_a_domain_places_whose_claims_cannot_use_it() -> None:
    # A hand-written claim without the toleration: a turn would close every free node to it.
    closed = Activity(waiting=1, allocated=0, tolerant=False)
    state = turns.step(State(), {A: closed}, 0.0)
    assert state.turn == ""
    state = turns.step(
        turns.step(State(), {A: Activity(1, 0)}, 0.0), {A: Activity(1, 0), B: closed}, 1.0
    )
    assert state.turn == ""


def test_fewer_allocations_are_not_placing() -> None:
    state = turns.step(State(), {A: Activity(0, 3)}, 0.0)
    later = turns.WINDOW + 1
    # A's pods end (fewer allocations): not placing, so B placing alone gets the turn.
    state = turns.step(state, {A: Activity(0, 1), B: Activity(1, 0)}, later)
    assert state.turn == B


def test_a_domain_deleted_with_claims_waiting_ends_its_turn_with_a_settle() -> None:
    state = turns.step(State(), {A: Activity(18, 0)}, 0.0)
    assert state.turn == A
    # A is deleted 1 s later, its claims still on their way: settle before B's turn.
    before, state = state, turns.step(state, {B: IDLE}, 1.0)
    assert state.turn == "" and turns.ended(before, state)
    state = turns.step(state, {B: IDLE}, 1.0 + turns.SETTLE)
    assert state.turn == B


def test_a_domain_deleted_just_after_it_formed_hands_the_turn_over_at_once() -> None:
    state = turns.step(State(), {A: Activity(18, 0)}, 0.0)
    state = turns.step(state, {A: Activity(0, 18)}, 2.0)
    assert state.turn == A and A in turns.placing(state, 3.0), "still in its placing window"
    # Its job ends a second later: nothing of A waits, so B (the next job) has the turn now.
    before, state = state, turns.step(state, {B: IDLE}, 3.0)
    assert state.turn == B and not turns.ended(before, state)
    assert turns.settling(state, 3.0) == 0.0


def test_a_domain_deleted_as_a_claim_of_it_starts_waiting_ends_its_turn_with_a_settle() -> None:
    state = turns.step(State(), {A: Activity(0, 18)}, 0.0)
    assert state.turn == A and not state.waiting
    # Deleted in the same second as a last pod of it was created: that claim is in flight.
    before, state = state, turns.step(state, {B: IDLE}, 1.0, gone_waiting=frozenset({A}))
    assert state.turn == "" and turns.ended(before, state)
