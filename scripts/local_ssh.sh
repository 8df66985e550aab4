#!/bin/sh
# A stand-in for ssh (`actorpipe launch --ssh scripts/local_ssh.sh`, Note [launch over ssh]): run as
# `local_ssh.sh HOST COMMAND`, it runs COMMAND, one shell string as ssh sends it, on this machine.
shift
exec sh -c "$*"
