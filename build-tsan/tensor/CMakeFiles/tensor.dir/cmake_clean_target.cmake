file(REMOVE_RECURSE
  "libtensor.a"
)
