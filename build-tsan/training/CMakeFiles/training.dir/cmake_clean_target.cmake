file(REMOVE_RECURSE
  "libtraining.a"
)
