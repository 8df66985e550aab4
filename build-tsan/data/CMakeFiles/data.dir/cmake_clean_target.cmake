file(REMOVE_RECURSE
  "libdata.a"
)
