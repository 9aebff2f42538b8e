"""Log messages the Redis channel layer drops as warnings that name the run."""

from __future__ import annotations

import logging

# channels_redis.core.RedisChannelLayer.group_send logs this at INFO when a group message finds
# channels full (their messages are then dropped); the arguments are (over, total, group).
OVER_CAPACITY = "channels over capacity in group"


class OverCapacityAsWarning(logging.Filter):
    """A logger filter for ``channels_redis.core``.

    The over-capacity record becomes a WARNING ``run <id>: <n> of <m> websockets over
    capacity ...``; a record below WARNING is dropped; the rest pass unchanged.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if OVER_CAPACITY in str(record.msg) and isinstance(record.args, tuple) and len(record.args) == 3:
            over, total, group = record.args
            run = str(group).removeprefix("run.")
            record.levelno, record.levelname = logging.WARNING, logging.getLevelName(logging.WARNING)
            record.msg = ("run %s: %s of %s websockets over capacity, an event dropped for them "
                          "(their pages fetch it from /api/runs/%s/events/; CHANNELS_CAPACITY sets the capacity)")
            record.args = (run, over, total, run)
            return True
        return record.levelno >= logging.WARNING
