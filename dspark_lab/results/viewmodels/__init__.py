"""What the views draw, derived once: frame helpers, a point as every figure shows it (point_view), an
inspected step as a point (inspect_view), the teaching views' picks, the panel's recorded backend."""
