file(REMOVE_RECURSE
  "libnetwork.a"
)
