"""Reading the managed jobs back from their bucket, against a real nats-server."""

from shared.bus import JOBS_BUCKET, Bus
from shared.jobs import NEXT_ID_KEY, ManagedJob, encode_job, job_key, load_jobs
from tests.conftest import bus_auth


def _job(job_id: int) -> ManagedJob:
    return ManagedJob(
        id=job_id, name=f"j{job_id}", namespace="default", resources="1x[CPU:1]", submitted_at=0.0
    )


async def test_load_jobs_reads_every_stored_id_and_skips_a_reserved_one(nats_url: str) -> None:
    bus = await Bus.connect(nats_url, source="test", auth=bus_auth(nats_url))
    try:
        kv = await bus.kv(JOBS_BUCKET)
        assert await load_jobs(kv) == []
        await kv.put(NEXT_ID_KEY, b"4")  # ids 1-3 taken; 2's launch has not stored it yet
        await kv.put(job_key(1), encode_job(_job(1)))
        await kv.put(job_key(3), encode_job(_job(3)))
        for _ in range(20):  # updates while reading must not drop anything
            await kv.put(job_key(3), encode_job(_job(3)))
        assert [job.id for job in await load_jobs(kv)] == [1, 3]
    finally:
        await bus.close()
