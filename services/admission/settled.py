"""Flavor assignments that still hold across passes, known without assigning again.

When quota is released in a cohort, every parked head of every ClusterQueue in it is tried
again; most fail exactly as before, because others took the released quota before their
turn. :class:`SettledFailures` remembers each failure with what it read of the usage and
hands it back while that reads the same (:meth:`SettledFailures.usage_read` states what that
is and why it is enough). It remembers the last success that borrows of each key the same
way: a borrower that fits is tried again after the heads that need no borrowing, and often
reads what one of its shape read in an earlier pass (the root's free quota is read capped at
what it asks). A success without borrowing is admitted at once: keeping it would only hold
memory (a first pass admits a hundred thousand of them). Built per configuration (the
scheduler makes a new one with each ``set_config``).
"""

from __future__ import annotations

from services.admission.flavors import AssignResult, ClusterQueueInfo, PodSetsShape
from services.admission.queues import Record
from shared.events import PodSet
from shared.quota import FlavorResource, QuotaNode, QuotaTree

__all__ = ["SettledFailures"]

# A node's usage of a pair, read within bounds (see _bounds): (usage, pair, (low, high)),
# each distinct bounds kept once (SettledFailures._reader).
Probe = tuple[dict[FlavorResource, int], FlavorResource, tuple[int, int]]
EXACT = (-(1 << 126), 1 << 126)  # bounds beyond any usage: read exactly
# A reading: its exact part (the ClusterQueue's own node, and cohorts between it and the
# root) and the root's part, each as read (() for a root the ClusterQueue does not have).
# Two parts, not one tuple: each is the object kept per version (_own_read, _root_read), so
# a reading is made without copying either, and compares part by part, at once where it is
# the same object.
Reading = tuple[tuple[int, ...], tuple[int, ...]]
# the root's usage of a pair, the pair, the root's subtree quota of it, the most asked of it
RootProbe = tuple[dict[FlavorResource, int], FlavorResource, int, int]


class RootReading:
    """One distinct root reading (ClusterQueues of a cohort asked the same share it): its
    probes, and what it last read with the root's usage version then (see _root_read)."""

    __slots__ = ("probes", "values", "version")

    def __init__(self, probes: list[RootProbe]) -> None:
        self.probes = probes
        self.version = -1  # versions count from 0: nothing read yet
        self.values: tuple[int, ...] = ()


# A remembered result: (whether preemption may still find victims, the reading, the result)
Kept = tuple[bool, Reading, AssignResult]


class Reader:
    """What an assignment of one shape in one ClusterQueue reads of the usage: its exact
    probes, the root's, whether every exact probe is of the ClusterQueue's own node, and the
    exact part last read with the own usage version it was read at (see _own_read); and the
    results remembered for it (SettledFailures.known): kept here, not in tables by key, so a
    lookup is the reader's and no more."""

    __slots__ = (
        "earlier",
        "exact",
        "failure",
        "fit",
        "own_only",
        "own_values",
        "own_version",
        "roots",
    )

    def __init__(self, exact: list[Probe], roots: RootReading | None, own_only: bool) -> None:
        self.exact, self.roots, self.own_only = exact, roots, own_only
        self.own_version = -1  # versions count from 0: nothing read yet
        self.own_values: tuple[int, ...] = ()
        self.failure: Kept | None = None  # the last failure
        self.earlier: Kept | None = None  # the failure before it (SettledFailures.earlier)
        self.fit: Kept | None = None  # the last success that borrows


class Quiet:
    """A ClusterQueue's offers (the very list object its queue made) that were all left
    parked at one reading: its own usage version then, and the root's usage read capped at
    the most any of them asks (``roots``; None: no root) with what it read."""

    __slots__ = ("offers", "own_version", "roots", "values")

    def __init__(
        self,
        offers: list[Record],
        own_version: int,
        roots: RootReading | None,
        values: tuple[int, ...],
    ) -> None:
        self.offers, self.own_version, self.roots, self.values = offers, own_version, roots, values


FAILURES_LIMIT = 100_000


class SettledFailures:
    """Assignments by (ClusterQueue, shape, victims possible), with the usage they read: the
    last failure and the last success that borrows of each."""

    __slots__ = ("_bounds", "_pairs", "_quiet", "_readers", "_roots", "_tree", "starts")

    def __init__(self, tree: QuotaTree) -> None:
        self._tree = tree
        # (ClusterQueue, shape) -> the usage its assignment reads: exactly, and of the root
        self._readers: dict[tuple[str, PodSetsShape], Reader] = {}
        self.starts = 0  # times the tables started over (reader): readers kept elsewhere go
        # Each distinct pair and bounds once, shared by the readers that read them (a reader
        # per ClusterQueue and shape: tens of thousands in a large cluster).
        self._pairs: dict[FlavorResource, FlavorResource] = {}
        self._bounds: dict[tuple[int, int], tuple[int, int]] = {}
        # One reading per distinct root reading, by (root, pairs with what is asked of them).
        self._roots: dict[tuple[int, tuple[tuple[FlavorResource, int], ...]], RootReading] = {}
        self._quiet: dict[str, Quiet] = {}  # by ClusterQueue (see quiet)

    def usage_read(
        self,
        info: ClusterQueueInfo,
        shape: PodSetsShape,
        pod_sets: list[PodSet],
        version: int | None = None,
        own_version: int | None = None,
    ) -> Reading:
        """What an assignment of ``pod_sets`` (of ``shape``) in ``info``'s ClusterQueue reads
        of the usage now; two assignments that read the same give the same result.

        For each (flavor, resource) of its resource groups: its usage on the ClusterQueue
        (read within bounds beyond which it tells nothing: _bounds) and on each cohort above
        it but the root, and the root's free quota (subtree minus usage) capped at the most
        of that resource the pod sets ask for. The cap is enough: the root
        enters only what is available, as ``min(K, free + M)`` with K and M set by the nodes
        below it, so once free reaches what is asked, either the request fits or K alone
        says by how much it does not; and reclaiming within the hierarchy never stops at the
        root. Everything else the assigner reads is the configuration.

        ``version``: the caller's count of changes of the root's usage; ``own_version``: of
        the ClusterQueue's own usage (None: read it now). They only spare reading again what
        they say is unchanged (_own_read, _root_read)."""
        return self.read(self.reader(info, shape, pod_sets), version, own_version)

    def reader(self, info: ClusterQueueInfo, shape: PodSetsShape, pod_sets: list[PodSet]) -> Reader:
        """The reader of ``shape`` in ``info``'s ClusterQueue (made on first use); past
        FAILURES_LIMIT of them every table built per shape starts over (shapes come and go:
        rather than pile up), and ``starts`` counts it: a reader kept outside the table
        since (a queue's, assigning.py _queue_readers) is dropped, else it would be read but never
        found here again (remember_quiet) and held past the limit."""
        key = (info.name, shape)
        reader = self._readers.get(key)
        if reader is None:
            if len(self._readers) >= FAILURES_LIMIT:
                self._readers.clear()
                self._roots.clear()
                self._pairs.clear()
                self._bounds.clear()
                self.starts += 1
            reader = self._readers[key] = self._reader(info, pod_sets)
        return reader

    def read(self, reader: Reader, version: int | None, own_version: int | None) -> Reading:
        """``usage_read`` with the reader in hand."""
        # The versions' hits are tested here, not in a call: most readings are of them.
        if reader.own_only and own_version is not None:
            if reader.own_version == own_version:
                read = reader.own_values
            else:
                read = self._own_read(reader, own_version)
        else:
            read = tuple([min(max(usage.get(fr, 0), b[0]), b[1]) for usage, fr, b in reader.exact])
        roots = reader.roots
        if roots is None:
            return read, ()
        if version is not None and roots.version == version:
            return read, roots.values
        return read, self._root_read(roots, version)

    @staticmethod
    def _own_read(reader: Reader, own_version: int) -> tuple[int, ...]:
        """The exact part of a reading whose probes are all of the ClusterQueue's own node,
        read once per ``own_version`` of its usage (the caller's count of its changes): a
        node's usage changes only with an admission or release in that ClusterQueue, which
        bumps it. Probes of a cohort between it and the root are not covered (their usage
        changes with any of their ClusterQueues): such a reading is read each time."""
        if reader.own_version == own_version:
            return reader.own_values
        values = reader.own_values = tuple(
            [min(max(usage.get(fr, 0), b[0]), b[1]) for usage, fr, b in reader.exact]
        )
        reader.own_version = own_version
        return values

    @staticmethod
    def _root_read(roots: RootReading, version: int | None) -> tuple[int, ...]:
        """The root's part of a reading, read once per ``version`` of the root's usage (the
        caller's count of its changes; None: read it now) for every ClusterQueue that
        shares it (one RootReading per distinct reading: see _reader)."""
        if version is not None and roots.version == version:
            return roots.values
        values = tuple(
            [min(subtree - usage.get(fr, 0), cap) for usage, fr, subtree, cap in roots.probes]
        )
        if version is not None:
            roots.version, roots.values = version, values
        return values

    def _reader(self, info: ClusterQueueInfo, pod_sets: list[PodSet]) -> Reader:
        """The usage an assignment of ``pod_sets`` reads (only resources they request: the
        assigner reads nothing of the others), each root pair with its subtree and cap; and
        whether every exact pair is of the ClusterQueue's own node (see _own_read)."""
        asked: dict[str, int] = {}
        for pod_set in pod_sets:
            for resource, quantity in pod_set.requests.items():
                asked[resource] = asked.get(resource, 0) + quantity * pod_set.count
        pairs = self._pairs
        frs = [
            pairs.setdefault((flavor, resource), (flavor, resource))
            for flavors, covered in zip(info.groups, info.covered, strict=True)
            for flavor in flavors
            for resource in covered
            if asked.get(resource, 0)
        ]
        exact: list[Probe] = []
        roots: RootReading | None = None
        node = own = self._tree.cluster_queues.get(info.name)
        seen: set[int] = set()
        own_only = True
        while node is not None and id(node) not in seen:  # a cycle is read exactly, once
            seen.add(id(node))
            if node.parent is None and node.name != info.name:
                key = (id(node), tuple((fr, asked[fr[1]]) for fr in frs))
                shared = self._roots.get(key)
                if shared is None:
                    shared = self._roots[key] = RootReading(
                        [(node.usage, fr, node.subtree.get(fr, 0), asked[fr[1]]) for fr in frs]
                    )
                roots = shared
            else:
                for fr in frs:
                    bounds = _bounds(node, fr, asked[fr[1]], node is own)
                    exact.append((node.usage, fr, self._bounds.setdefault(bounds, bounds)))
                own_only = own_only and node is own
            node = node.parent
        return Reader(exact, roots, own_only)

    def known(self, reader: Reader, victims_possible: bool, usage: Reading) -> AssignResult | None:
        """The result remembered on ``reader`` (its failure, else its success) if it was
        assigned with the same ``victims_possible`` and read this same ``usage``."""
        found = reader.failure
        if found is not None and found[0] is victims_possible and found[1] == usage:
            return found[2]
        found = reader.fit
        if found is not None and found[0] is victims_possible and found[1] == usage:
            return found[2]
        return None

    def lookup(
        self, reader: Reader, victims_possible: bool, version: int, own_version: int
    ) -> AssignResult | None:
        """``known``, else ``earlier``, of what ``reader`` reads now (``read`` at the root's
        usage ``version`` and the ClusterQueue's ``own_version``): one call where a head is
        looked up, and the reading made once for both."""
        usage = self.read(reader, version, own_version)
        return self.known(reader, victims_possible, usage) or self.earlier(
            reader, victims_possible, usage
        )

    @staticmethod
    def earlier(reader: Reader, victims_possible: bool, usage: Reading) -> AssignResult | None:
        """The failure ``reader`` had before its last one (``remember`` keeps it), if it was
        assigned with the same ``victims_possible`` and read this same ``usage``: what
        assigning again would give (usage_read). The two swap places, so each reader keeps its
        last two distinct failures: a head of a full cohort fails at the cohort's settled
        reading, at another while freed quota is taken in a pass, then at the settled one
        again, and neither is searched twice. Kept on the reader, it goes with it (the
        tables starting over: ``reader``)."""
        found = reader.earlier
        if found is None or found[0] is not victims_possible or found[1] != usage:
            return None
        reader.earlier, reader.failure = reader.failure, found
        return found[2]

    def remember(
        self, reader: Reader, victims_possible: bool, usage: Reading, result: AssignResult
    ) -> None:
        """Remember a result on its reader: the last failure (the one it replaces kept as
        the earlier: ``earlier``) and the last success that borrows each (see the module
        docstring). Two that read the same are the same (see usage_read), so one handed back
        is what assigning again would give; its assignments and usage are then shared by the
        workloads admitted with it (nothing changes them: FlavorAssignment is frozen, the
        usage only read)."""
        if not result.fits:
            if reader.failure is not None:
                reader.earlier = reader.failure
            reader.failure = (victims_possible, usage, result)
        elif result.borrows:
            reader.fit = (victims_possible, usage, result)

    def quiet(
        self,
        name: str,
        offers: list[Record] | None,
        own_version: int,
        version: int,
    ) -> bool:
        """Whether ``offers`` are the ClusterQueue's remembered quiet ones (remember_quiet)
        and each reads now what it read then: its own usage is at the same ``own_version``
        and the root's usage, capped at the most any of them asks, reads the same (at the
        root's usage ``version``). Then each would be left parked again: its reading gives
        the failure it had (usage_read), with the message it already has."""
        known = self._quiet.get(name)
        if known is None or known.offers is not offers or known.own_version != own_version:
            return False
        return known.roots is None or self._root_read(known.roots, version) == known.values

    def remember_quiet(
        self,
        name: str,
        offers: list[Record],
        own_version: int,
        version: int,
    ) -> None:
        """Every one of ``offers`` (of ClusterQueue ``name``) was just left parked, at the
        own usage ``own_version`` and the root's ``version``: remembered for quiet, if each
        one's reading is of its own node and the root only (a cohort between them changes
        with its other ClusterQueues) and was read for it (usage_read). The same offers
        as remembered keep their reading of the root (the same shapes read the same)."""
        known = self._quiet.get(name)
        if known is not None and known.offers is offers:
            known.own_version = own_version
            known.values = () if known.roots is None else self._root_read(known.roots, version)
            return
        widest: dict[FlavorResource, RootProbe] = {}
        for record in offers:
            reader = self._readers.get((name, record.shape_key or record.shape))
            if reader is None or not reader.own_only:
                self._quiet.pop(name, None)
                return
            for probe in () if reader.roots is None else reader.roots.probes:
                wide = widest.get(probe[1])
                if wide is None or wide[3] < probe[3]:
                    widest[probe[1]] = probe
        roots: RootReading | None = None
        if widest:
            probes = list(widest.values())
            # by the root's usage (not the root, as _reader's are keyed): never one of those
            key = (id(probes[0][0]), tuple((fr, cap) for _, fr, _, cap in probes))
            roots = self._roots.get(key)
            if roots is None:
                roots = self._roots[key] = RootReading(probes)
        values = () if roots is None else self._root_read(roots, version)
        self._quiet[name] = Quiet(offers, own_version, roots, values)


def _bounds(node: QuotaNode, fr: FlavorResource, asked: int, own: bool) -> tuple[int, int]:
    """The bounds within which ``node``'s usage of ``fr`` is read (usage below the low one
    reads as it, above the high one as it): every assignment of a shape asking at most
    ``asked`` of the resource reads the same outside them as at them.

    For the ClusterQueue's own node, under a cohort, with no borrowing or lending limit on
    the pair: its subtree quota less ``asked``, and its subtree quota plus 1. The assigner
    reads that node's usage only as ``usage + value > subtree`` (borrowing, and reclaiming
    in a hierarchy), ``value`` from 0 to ``asked`` (0: a pod set that partial admission may
    reduce to 0 pods, ``min_count`` 0, still tests a resource it requests): false for every
    value when usage is at most the low bound, true for every one when usage is at least the
    high bound; usage at the subtree (false for 0) and above it (true) read apart. What it
    may use is its parent's to say: its local share, ``guaranteed - usage``, is 0 without a
    lending limit, and the parent's is not capped without a borrowing limit (shared/quota.py
    ``available_at``). So a ClusterQueue reads the same while it keeps borrowing, or keeps
    room for the shape, whatever it uses. Any other node (a cohort between it and the root,
    a ClusterQueue that is its own root, or one with a limit) is read exactly (EXACT), and so
    is any node for a request not above 0 (validation refuses one: kept as a guard)."""
    quota = node.quotas.get(fr)
    if not own or node.parent is None or asked <= 0:
        return EXACT
    if quota is not None and (quota.borrowing_limit is not None or quota.lending_limit is not None):
        return EXACT
    subtree = node.subtree.get(fr, 0)
    return subtree - asked, subtree + 1
