"""The transitions machine of a spec: its states skip empty callback lists, nothing else."""

from __future__ import annotations

from modefsm.engine._machine import _Machine


class TestStates:
    """States with entry or exit callbacks still run them, in transitions' order."""

    def test_enter_and_exit_callbacks_run(self):
        calls: list[str] = []
        machine = _Machine(model=None, states=["a", "b"], initial="a", auto_transitions=False)
        machine.add_transition("go", "a", "b")
        machine.get_state("a").add_callback("exit", lambda: calls.append("exit a"))
        machine.get_state("b").add_callback("enter", lambda: calls.append("enter b"))

        class Model:
            state = "a"

        model = Model()
        assert machine.events["go"].trigger(model)
        assert (model.state, calls) == ("b", ["exit a", "enter b"])

    def test_states_without_callbacks_change_state(self):
        machine = _Machine(model=None, states=["a", "b"], initial="a", auto_transitions=False)
        machine.add_transition("go", "a", "b")

        class Model:
            state = "a"

        model = Model()
        assert machine.events["go"].trigger(model)
        assert model.state == "b"
