file(REMOVE_RECURSE
  "libactors.a"
)
