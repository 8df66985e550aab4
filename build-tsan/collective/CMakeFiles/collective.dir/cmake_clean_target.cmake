file(REMOVE_RECURSE
  "libcollective.a"
)
