"""Turns, first come first served (supervisor/turns.py): at most ``size`` held, the rest in join order; a
cancel leaves the line; a release counts once."""

from __future__ import annotations

import asyncio

import pytest

from peon.supervisor.turns import Turns


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 10))


def test_at_most_size_turns_are_held_and_the_rest_follow_in_join_order():
    async def scenario():
        turns = Turns(2)
        first, second, third, fourth = (turns.join() for _ in range(4))
        assert (first.held, second.held, third.held, fourth.held) == (True, True, False, False)
        assert turns.held == 2 and turns.waiting == 2
        second.release()
        assert third.held and not fourth.held
        first.release()
        assert fourth.held and turns.held == 2 and turns.waiting == 0

    run(scenario())


def test_a_wait_returns_once_the_turn_is_held():
    async def scenario():
        turns = Turns(1)
        holder, waiter = turns.join(), turns.join()
        never = asyncio.Event()
        waiting = asyncio.ensure_future(waiter.wait(never))
        await asyncio.sleep(0)
        assert not waiting.done()
        holder.release()
        assert await waiting is True and waiter.held

    run(scenario())


def test_a_cancel_leaves_the_line_and_the_next_moves_up():
    async def scenario():
        turns = Turns(1)
        holder, cancelled_one, next_one = turns.join(), turns.join(), turns.join()
        cancelled = asyncio.Event()
        waiting = asyncio.ensure_future(cancelled_one.wait(cancelled))
        await asyncio.sleep(0)
        cancelled.set()
        assert await waiting is False and not cancelled_one.held
        assert turns.waiting == 1
        holder.release()
        assert next_one.held and turns.held == 1

    run(scenario())


def test_a_release_counts_once():
    async def scenario():
        turns = Turns(1)
        first, second, third = turns.join(), turns.join(), turns.join()
        first.release()
        first.release()
        assert second.held and not third.held and turns.held == 1

    run(scenario())


def test_a_line_needs_a_turn():
    with pytest.raises(ValueError):
        Turns(0)
