# fn main() {}
