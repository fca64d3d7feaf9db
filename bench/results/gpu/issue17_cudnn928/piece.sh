#!/usr/bin/env bash
# A transfer call: keep this call's part of cuDNN 9.28 in /tmp/cparts.
source "$(dirname "$0")/env.sh"
ls -la /tmp/cparts; du -sh /tmp/cparts
