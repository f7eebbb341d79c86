"""The admission core's flavor assignment of a head, with what it remembers, and which
offered heads a pass leaves parked without trying them.

:meth:`Assigning._assign` hands back a remembered result while what it read of the usage is
the same (services/admission/settled.py), else searches (services/admission/partial.py).
:meth:`Assigning._leave_parked` says whether an offered (parked) head popped in its turn is
left parked as it is, and presumes the same of the offered heads after it
(services/admission/presumed.py), at once for a whole ClusterQueue when its offers and what
they read are those it last found all left parked (settled.py: ``SettledFailures.quiet``).
"""

from __future__ import annotations

from services.admission import partial
from services.admission.flavors import AssignResult
from services.admission.placement import PENDING_REASON, Placement
from services.admission.presumed import presume, presume_all
from services.admission.queues import ClusterQueueQueue, OrderKey, Record
from services.admission.settled import Reader

__all__ = ["Assigning", "Failed"]

# Failures in this pass: (ClusterQueue, shape) -> (usage version of its cohort tree, result)
Failed = dict[tuple[str, bytes], tuple[int, AssignResult]]
QUEUE_READERS = 64  # settled readers kept with a queue (shapes come and go: see _reader)


class Assigning(Placement):
    """The flavor assignment of heads in a pass (the pass is the Scheduler's)."""

    presumes = True  # offered heads presumed left parked (presumed.py); tests turn it off
    quiet_queues = 0  # ClusterQueues whose offers the last pass left parked whole (quiet)

    def _assign(
        self,
        name: str,
        record: Record,
        failed: Failed,
        queue: ClusterQueueQueue | None = None,
    ) -> AssignResult:
        """The head's flavor assignment against the usage now (a failure is remembered for
        its shape until the usage of its cohort tree changes; a failure and a success,
        across passes while what they read of the usage is the same:
        services/admission/settled.py). ``queue``: its ClusterQueue's, if at hand."""
        pod_sets_shape = record.shape_key or record.shape  # the property's call spared
        version = self._usage_version.get(self._config.root_of.get(name, name), 0)
        cached = failed.get((name, pod_sets_shape))
        if cached is not None and cached[0] == version:
            return cached[1]  # read here, without a call: a backlog of a shape hits it often
        own_version = self._own_usage_version.get(name, 0)
        if queue is None:
            queue = self._queues[name]
        known = self._known(name, queue, record, None, version, own_version)
        if known is None:
            return self._search(name, queue, record, failed, version, own_version)
        if not known.fits:
            failed[(name, pod_sets_shape)] = (version, known)
        return known

    def _versions(self, name: str) -> tuple[int, int]:
        """The usage versions of ClusterQueue ``name``'s root and of its own node."""
        root = self._config.root_of.get(name, name)
        return self._usage_version.get(root, 0), self._own_usage_version.get(name, 0)

    def _known(
        self,
        name: str,
        queue: ClusterQueueQueue,
        record: Record,
        failed: Failed | None,
        version: int,
        own_version: int,
    ) -> AssignResult | None:
        """``_assign``'s result if it is remembered and holds now (None: none does), nothing
        assigned; ``version`` and ``own_version`` are ``_versions(name)`` now (the caller's,
        read once for the heads of a queue). ``failed`` None: the pass's failures by shape
        are neither read nor noted (see _leave_parked; _assign reads and notes them itself)."""
        pod_sets_shape = record.shape_key or record.shape  # the property's call spared
        if failed is not None:
            cached = failed.get((name, pod_sets_shape))
            if cached is not None and cached[0] == version:
                return cached[1]
        victims_possible = self._victims_possible(record)
        reader = self._queue_readers(queue).get(pod_sets_shape) or self._reader(name, queue, record)
        result = self._settled.lookup(reader, victims_possible, version, own_version)
        if result is None:
            return None
        if failed is not None and not result.fits:
            failed[(name, pod_sets_shape)] = (version, result)
        return result

    def _victims_possible(self, record: Record) -> bool:
        """Whether preemption may help ``record``'s workload: unless it is a partial one
        preemption cannot help (``_no_victims``, mostly empty: then it is not read)."""
        no_victims = self._no_victims
        return not no_victims or record.wl.ref.uid not in no_victims

    def _queue_readers(self, queue: ClusterQueueQueue) -> dict[bytes, Reader]:
        """The settled readers kept with ``queue``: those made since the settled tables last
        started over (SettledFailures.reader); older ones are dropped, as the tables dropped
        theirs, else they would be read but never found there again (remember_quiet) and
        held past its limit."""
        settled = self._settled
        if queue.readers_start != settled.starts:
            queue.readers.clear()
            queue.readers_start = settled.starts
        return queue.readers

    def _reader(self, name: str, queue: ClusterQueueQueue, record: Record) -> Reader:
        """The settled reader of ``record``'s shape in ClusterQueue ``name``, kept with its
        queue (``queue.readers``: a lookup among its few shapes, not in the table of every
        ClusterQueue's), up to QUEUE_READERS of them (_queue_readers)."""
        shape = record.shape_key or record.shape
        readers = self._queue_readers(queue)
        reader = readers.get(shape)
        if reader is None:
            if len(readers) >= QUEUE_READERS:
                readers.clear()
            reader = self._settled.reader(self._config.cqs[name], shape, record.wl.pod_sets)
            # kept with the queue as of the tables' start it was made in (it may start one)
            self._queue_readers(queue)[shape] = reader
        return reader

    def _search(
        self,
        name: str,
        queue: ClusterQueueQueue,
        record: Record,
        failed: Failed,
        version: int,
        own_version: int,
    ) -> AssignResult:
        """``_assign`` of a head whose result ``_known`` just found not remembered (nothing
        changed the usage since; ``version`` and ``own_version`` as there): searched, and
        remembered."""
        config = self._config
        victims_possible = self._victims_possible(record)
        info = config.cqs[name]
        settled = self._settled
        reader = self._reader(name, queue, record)
        usage = settled.read(reader, version, own_version)
        result = partial.assign(
            info, config.flavors, config.tree, record.wl.pod_sets, victims_possible=victims_possible
        )
        settled.remember(reader, victims_possible, usage, result)
        if not result.fits:
            failed[(name, record.shape_key or record.shape)] = (version, result)
        return result

    def _taken(
        self, name: str, record: Record, failed: Failed, known: AssignResult
    ) -> AssignResult:
        """``_assign`` of an offered ``record`` just taken to be tried, whose remembered result
        ``known`` held when ``_leave_parked`` looked (nothing changes the usage in between):
        that result, noted in ``failed`` as ``_assign`` notes a failure, without reading it
        again."""
        if not known.fits:
            root = self._config.root_of.get(name, name)
            failed[(name, record.shape_key or record.shape)] = (
                self._usage_version.get(root, 0),
                known,
            )
        return known

    @staticmethod
    def _fails_unchanged(record: Record, known: AssignResult) -> bool:
        """Whether trying an offered (parked) ``record`` whose failure ``known`` holds would
        change nothing: no decision (the same reason, message and preemption verdict as the
        last one it had), and ``_decide`` would park it again as it is (a parked record is in
        a BestEffortFIFO queue and neither reserved nor nominated: both queue it anew). Then
        the pass leaves it parked (queues.py: offer_parked)."""
        if known.fits:
            return False  # a success: it is tried (settled.py keeps successes too)
        return record.emitted == (PENDING_REASON, known.message, known.preemption_may_help)

    def _leave_parked(
        self,
        name: str,
        queue: ClusterQueueQueue,
        record: Record,
        failed: Failed,
        high: OrderKey,
    ) -> list[Record] | AssignResult | None:
        """Whether the offered ``record``, popped in its turn, is left parked as it is
        (``_fails_unchanged``): if so it is taken off the offers, with the offered heads after
        it that are presumed left parked too (``presume``: empty unless ``presumes``; ``high``
        as it says), and those are returned; else it is to be tried, and what is returned is
        its remembered result that holds now, or None if none does.

        A ClusterQueue whose offers are the very ones it had when all were last found left
        parked at one reading, and that reads the same now (settled.py: ``quiet``), leaves
        them parked without a look at each: each would read what it read then, and the
        failure it had then is what its reading gives. When all its offers are found left
        parked at one reading in this pass, that is remembered."""
        settled = self._settled
        offers = queue.offers
        version, own_version = self._versions(name)
        # A failure remembered in this pass by shape alone (_assign's failed) is one of a
        # workload preemption may help, the same as every other's only while none is not.
        uniform = self.presumes and not self._no_victims
        if uniform and settled.quiet(name, offers, own_version, version):
            self.quiet_queues += 1
            queue.skip_offered()
            return presume_all(queue, high)
        # Offers are of distinct shapes, each looked at once a version, so a failure by shape
        # is seldom read again in the pass; while no workload is one preemption cannot help,
        # what it holds is what the settled reader gives anyway: the pass's failures left be.
        memo = failed if self._no_victims else None
        known = self._known(name, queue, record, memo, version, own_version)
        if known is None or not self._fails_unchanged(record, known):
            return known
        whole = offers is not None and len(queue.offered) == len(offers)
        queue.skip_offered()
        if not self.presumes:
            return []
        items = self._presume(name, queue, memo, version, own_version, high)
        if uniform and whole and not queue.offered and offers is not None:
            settled.remember_quiet(name, offers, own_version, version)
        return items

    def _presume(
        self,
        name: str,
        queue: ClusterQueueQueue,
        memo: Failed | None,
        version: int,
        own_version: int,
        high: OrderKey,
    ) -> list[Record]:
        """``presume`` of ``queue``'s next offers, each checked as ``_leave_parked`` checks
        the one it was called for (a function of its own: the closure's cells are made
        only where it is needed, not at every call of ``_leave_parked``)."""

        def holds(record: Record) -> bool:
            known = self._known(name, queue, record, memo, version, own_version)
            return known is not None and self._fails_unchanged(record, known)

        return presume(queue, high, holds)
