file(REMOVE_RECURSE
  "libschedule.a"
)
