file(REMOVE_RECURSE
  "libcheckpoint.a"
)
