"""The ``failures`` fixture (tests/fixtures/failures.py): a component thread that dies fails its test.

Each case runs a small test session in-process (pytester) whose test starts a component whose thread dies
or lives, and reads that session's outcome and output.
"""

from __future__ import annotations

import textwrap

import pytest

CONFTEST = 'pytest_plugins = ["tests.fixtures.failures"]\n'

# Components as koordlet's are: start(on_failure) runs a thread whose root catches what kills it and hands it
# to on_failure from that thread.
COMPONENTS = '''
import threading

class DiskOnFire(Exception):
    pass

class Component:
    def __init__(self, fail_in_loop=False, fail_at_stop=False):
        self._fail_in_loop = fail_in_loop
        self._fail_at_stop = fail_at_stop
        self._stop = threading.Event()
        self._thread = None

    def start(self, on_failure):
        self._thread = threading.Thread(target=self._loop, args=(on_failure,), name="component-loop")
        self._thread.start()

    def stop(self):
        self._stop.set()
        self._thread.join(10)

    def _loop(self, on_failure):
        try:
            if self._fail_in_loop:
                self._round()
            self._stop.wait()
            if self._fail_at_stop:
                raise DiskOnFire("flush at stop failed")
        except BaseException as exc:
            on_failure(exc)

    def _round(self):
        raise DiskOnFire("state dir on fire")

    def wait_dead(self):
        self._thread.join(10)
        assert not self._thread.is_alive()
'''


def run(pytester: pytest.Pytester, test_source: str) -> pytest.RunResult:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(components=COMPONENTS, test_inner=textwrap.dedent(test_source))
    return pytester.runpytest_inprocess("-p", "no:cacheprovider")


def test_a_component_thread_that_raises_fails_its_test(pytester: pytest.Pytester) -> None:
    result = run(pytester, """
        from components import Component

        def test_starts_a_dying_component(failures):
            component = Component(fail_in_loop=True)
            component.start(failures.callback("dying"))
            component.wait_dead()
    """)
    result.assert_outcomes(failed=1)
    # The component, its thread, the exception and the traceback down to where it was raised.
    result.stdout.fnmatch_lines([
        "*component 'dying' failed in thread 'component-loop': DiskOnFire('state dir on fire')*",
        "*in _round*",
        "*DiskOnFire: state dir on fire*",
    ])


def test_a_real_koordlet_component_that_dies_fails_its_test(pytester: pytest.Pytester) -> None:
    # NodeMetricRunner counts an Exception in a round and goes on; anything else ends its thread, which
    # reports it to on_failure.
    result = run(pytester, """
        import threading

        from koordlet.apis.nodemetric import NodeMetricCollectPolicy
        from koordlet.statesinformer.nodemetric import NodeMetricRunner

        class CacheLost(BaseException):
            pass

        class LostCache:
            def __init__(self):
                self.queried = threading.Event()

            def aggregate(self, *args):
                self.queried.set()
                raise CacheLost("metric cache closed under the runner")

        class NoPods:
            def pods(self):
                return []

        def test_runs_nodemetric(failures):
            cache = LostCache()
            runner = NodeMetricRunner(cache, NoPods(), [], NodeMetricCollectPolicy(report_interval_seconds=0.01))
            runner.start(failures.callback("nodemetric"))
            try:
                assert cache.queried.wait(10)
            finally:
                runner.stop(10)
    """)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "*component 'nodemetric' failed in thread 'koordlet-nodemetric': CacheLost(*",
        "*CacheLost: metric cache closed under the runner*",
    ])


def test_a_component_that_does_not_fail_passes(pytester: pytest.Pytester) -> None:
    result = run(pytester, """
        from components import Component

        def test_starts_a_healthy_component(failures):
            component = Component()
            component.start(failures.callback("healthy"))
            component.stop()
    """)
    result.assert_outcomes(passed=1)


def test_an_expected_failure_taken_by_the_test_passes(pytester: pytest.Pytester) -> None:
    result = run(pytester, """
        from components import Component, DiskOnFire

        def test_expects_the_component_to_die(failures):
            component = Component(fail_in_loop=True)
            component.start(failures.callback("dying"))
            error = failures.wait_for("dying")
            assert isinstance(error, DiskOnFire) and str(error) == "state dir on fire"

        def test_takes_what_was_reported(failures):
            component = Component(fail_in_loop=True)
            component.start(failures.callback("dying"))
            component.wait_dead()
            assert [str(e) for e in failures.take("dying")] == ["state dir on fire"]
            assert failures.take("dying") == []
    """)
    result.assert_outcomes(passed=2)


def test_taking_one_components_failure_leaves_the_others(pytester: pytest.Pytester) -> None:
    result = run(pytester, """
        from components import Component

        def test_two_components_die(failures):
            first, second = Component(fail_in_loop=True), Component(fail_in_loop=True)
            first.start(failures.callback("first"))
            second.start(failures.callback("second"))
            second.wait_dead()
            failures.wait_for("first")
    """)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*1 component failure(s) reported while the test ran*",
                                 "*component 'second' failed*"])
    result.stdout.no_fnmatch_line("*component 'first' failed*")


def test_a_failure_while_a_fixture_stops_the_component_errors_at_teardown(pytester: pytest.Pytester) -> None:
    result = run(pytester, """
        import pytest
        from components import Component

        @pytest.fixture
        def component(failures):
            component = Component(fail_at_stop=True)
            component.start(failures.callback("flusher"))
            yield component
            component.stop()

        def test_uses_the_component(component):
            pass
    """)
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines([
        "*ERROR at teardown of test_uses_the_component*",
        "*component 'flusher' failed in thread 'component-loop': DiskOnFire('flush at stop failed')*",
    ])


def test_a_test_that_fails_on_its_own_still_names_the_component_failure(pytester: pytest.Pytester) -> None:
    # The component's death is often why the test's own wait ran out: both are reported.
    result = run(pytester, """
        from components import Component

        def test_waits_in_vain(failures):
            component = Component(fail_in_loop=True)
            component.start(failures.callback("dying"))
            component.wait_dead()
            assert False, "the result never came"
    """)
    result.assert_outcomes(failed=1, errors=1)
    result.stdout.fnmatch_lines(["*AssertionError: the result never came*"])
    result.stdout.fnmatch_lines([  # pytest prints the errors section before the failures one
        "*ERROR at teardown of test_waits_in_vain*",
        "*1 component failure(s) reported by the end of the test*",
        "*component 'dying' failed in thread 'component-loop': DiskOnFire('state dir on fire')*",
    ])


def test_waiting_for_a_failure_that_never_comes_fails_naming_the_component(pytester: pytest.Pytester) -> None:
    result = run(pytester, """
        from components import Component

        def test_expects_a_failure(failures):
            component = Component()
            component.start(failures.callback("healthy"))
            try:
                failures.wait_for("healthy", timeout=0.05)
            finally:
                component.stop()
    """)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*component 'healthy' reported no failure within 0.05 s*"])


def test_a_callback_needs_a_component_name(pytester: pytest.Pytester) -> None:
    result = run(pytester, """
        def test_unnamed(failures):
            failures.callback("")
    """)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*ValueError: a failure callback needs the name of its component*"])
