// NumPy .npy and CSV files written by numpy: Fashion-MNIST as .npy and as CSV gives IDX's batches, every
// header version and dtype reads, and bad files are refused naming the file and the place.
#include <doctest/doctest.h>

#include <cstdlib>
#include <fstream>

#include "data/csv.hpp"
#include "data/fashion_mnist.hpp"
#include "data/npy.hpp"
#include "data/open_data.hpp"
#include "data_files.hpp"
#include "test_support.hpp"

using namespace ap;
using ap::test::contains;
using ap::test::error_of;
using ap::test::numpy;
using ap::test::same_batches;

TEST_CASE("Fashion-MNIST written as .npy and as CSV gives the IDX reader's batches") {
  test::scratch_dir dir("fashion_npy");
  numpy(dir, std::string(R"(
import gzip
src = ')") + default_fashion_mnist_dir + R"(/'
x = np.frombuffer(gzip.open(src + 'train-images-idx3-ubyte.gz').read(), np.uint8, offset=16).reshape(-1, 784)[:1000]
y = np.frombuffer(gzip.open(src + 'train-labels-idx1-ubyte.gz').read(), np.uint8, offset=8)[:1000]
f = x.astype(np.float32) / np.float32(255)
np.save(d + 'x.npy', f)
np.save(d + 'y.npy', y.astype(np.int64))
np.save(d + 'y8.npy', y)
header = 'label,' + ','.join('p%d' % i for i in range(784))
np.savetxt(d + 'f.csv', np.column_stack([y[:300].astype(np.float64), f[:300].astype(np.float64)]), fmt='%.9g',
           delimiter=',', header=header, comments='')
)");
  data_config idx;
  idx.path = default_fashion_mnist_dir;
  idx.limit = 1000;
  const data_sets from_idx = open_data(idx, 0, 10, 1, 0);
  CHECK(from_idx.validation->size() == 10000);
  data_config npy;
  npy.path = dir.file("x.npy");
  npy.labels = dir.file("y.npy");
  const data_sets from_npy = open_data(npy, 0, 10, 1, 0);
  CHECK(from_npy.train->size() == 1000);
  CHECK(same_batches(*from_idx.train, *from_npy.train, 4, 64));
  CHECK(same_batches(*from_idx.train, *npy_source(dir.file("x.npy"), dir.file("y8.npy"), 10), 4, 64));
  data_config csv;
  csv.path = dir.file("f.csv");
  const data_sets from_csv = open_data(csv, 0, 10, 1, 0);
  CHECK(same_batches(*first_samples(from_idx.train, 300), *from_csv.train, 4, 32));
}

TEST_CASE("npy: versions 1.0, 2.0 and 3.0 and every supported dtype read, one-dimensional features as a column") {
  test::scratch_dir dir("npy_versions");
  numpy(dir, R"(
a = np.arange(12, dtype=np.float64).reshape(3, 4) / 4
for v in [(1, 0), (2, 0), (3, 0)]:
    with open(d + 'v%d.npy' % v[0], 'wb') as f:
        np.lib.format.write_array(f, a, version=v)
for t in ['float32', 'float64', 'uint8', 'int32', 'int64']:
    np.save(d + t + '.npy', (np.arange(6) * 3).astype(t).reshape(2, 3))
np.save(d + 'labels3.npy', np.array([0, 2, 1], dtype=np.int32))
np.save(d + 'labels2.npy', np.array([1, 0], dtype=np.uint8))
np.save(d + 'column.npy', np.array([0.5, 1.5], dtype=np.float32))
)");
  for (int v = 1; v <= 3; ++v) {
    const npy_array a = read_npy(dir.file("v" + std::to_string(v) + ".npy"));
    CHECK(a.shape == std::vector<std::size_t>{3, 4});
    CHECK(a.at(5) == 1.25);
    const dataset d = npy_dataset(dir.file("v" + std::to_string(v) + ".npy"), dir.file("labels3.npy"));
    CHECK(d.num_classes == 3);
    CHECK(d.inputs(2, 3) == 2.75f);
    CHECK(d.labels(1) == 2.0f);
  }
  for (const char* t : {"float32", "float64", "uint8", "int32", "int64"}) {
    const dataset d = npy_dataset(dir.file(std::string(t) + ".npy"), dir.file("labels2.npy"), 4);
    CAPTURE(t);
    CHECK(shape_of(d.inputs) == shape_t{2, 3});
    CHECK(d.inputs(1, 2) == 15.0f);
    CHECK(d.num_classes == 4);
  }
  const dataset column = npy_dataset(dir.file("column.npy"), dir.file("labels2.npy"));
  CHECK(shape_of(column.inputs) == shape_t{2, 1});
}

TEST_CASE("npy: bad files are refused naming the file and the place") {
  test::scratch_dir dir("npy_bad");
  numpy(dir, R"(
x = np.zeros((4, 3), dtype=np.float32)
np.save(d + 'x.npy', x)
np.save(d + 'int16.npy', x.astype(np.int16))
np.save(d + 'big_endian.npy', x.astype('>f4'))
np.save(d + 'fortran.npy', np.asfortranarray(np.ones((4, 3), dtype=np.float32)))
np.save(d + 'scalar.npy', np.float32(1))
np.save(d + 'labels.npy', np.array([0, 1, 2, 1]))
np.save(d + 'labels_2d.npy', np.zeros((4, 1), dtype=np.int64))
np.save(d + 'labels_3.npy', np.array([0, 1, 2]))
np.save(d + 'negative.npy', np.array([0, 1, -2, 1]))
np.save(d + 'fraction.npy', np.array([0, 1.5, 2, 1]))
nan = x.copy(); nan[2, 1] = np.nan
np.save(d + 'nan.npy', nan)
inf = x.copy(); inf[3, 2] = np.inf
np.save(d + 'inf.npy', inf)
raw = open(d + 'x.npy', 'rb').read()
open(d + 'truncated.npy', 'wb').write(raw[:-5])
open(d + 'magic.npy', 'wb').write(b'XNUMPY' + raw[6:])
)");
  const auto f = [&](const char* name) { return dir.file(name); };
  const auto refusal = [&](const char* features, const char* labels, std::size_t classes = 0) {
    return error_of([&] { npy_dataset(f(features), f(labels), classes); });
  };
  CHECK(contains(refusal("int16.npy", "labels.npy"), f("int16.npy") + ": dtype '<i2' is not supported"));
  CHECK(contains(refusal("big_endian.npy", "labels.npy"), f("big_endian.npy") + ": dtype '>f4' is not supported"));
  CHECK(contains(refusal("fortran.npy", "labels.npy"), f("fortran.npy") + ": fortran_order is True"));
  CHECK(contains(refusal("scalar.npy", "labels.npy"), f("scalar.npy") + ": rank 0"));
  CHECK(contains(refusal("x.npy", "labels_2d.npy"), f("labels_2d.npy") + ": labels of shape (4, 1): expected rank 1"));
  CHECK(contains(refusal("x.npy", "labels_3.npy"), "differ in length: 4 feature rows but 3 labels"));
  CHECK(contains(refusal("x.npy", "labels_3.npy"), f("labels_3.npy")));
  CHECK(contains(refusal("x.npy", "negative.npy"), f("negative.npy") + ": label -2.000000 at index 2 is not a class id"));
  CHECK(contains(refusal("x.npy", "fraction.npy"), f("fraction.npy") + ": label 1.500000 at index 1 is not a class id"));
  CHECK(contains(refusal("x.npy", "labels.npy", 2), f("labels.npy") + ": label 2 at index 2 is not below the model's 2 classes"));
  CHECK_NOTHROW(npy_dataset(f("x.npy"), f("labels.npy"), 3));
  CHECK(contains(refusal("nan.npy", "labels.npy"), f("nan.npy") + ": feature nan at row 2, column 1 is not finite"));
  CHECK(contains(refusal("inf.npy", "labels.npy"), f("inf.npy") + ": feature inf at row 3, column 2 is not finite"));
  CHECK(contains(refusal("truncated.npy", "labels.npy"), f("truncated.npy") + ": truncated: shape (4, 3) of <f4 needs 48 bytes"));
  CHECK(contains(refusal("magic.npy", "labels.npy"), f("magic.npy") + ": bad magic at byte 0"));
  CHECK(contains(refusal("missing.npy", "labels.npy"), f("missing.npy") + ": cannot open"));
  std::ofstream(f("bad_header.npy"), std::ios::binary) << std::string("\x93NUMPY\x01\x00\x20\x00", 10)
                                                       << "{'descr': '<f4', 'shape': [4], }\n";
  CHECK(contains(refusal("bad_header.npy", "labels.npy"), f("bad_header.npy") + ": bad header at byte "));
  // open_data: npy features need labels, and a language model cannot read them.
  data_config c;
  c.path = f("x.npy");
  CHECK(contains(error_of([&] { open_data(c, 0, 3, 1, 0); }), "need a labels file"));
  c.labels = f("labels.npy");
  CHECK(contains(error_of([&] { open_data(c, 8, 256, 1, 0); }), f("x.npy") + " is npy, a classification format"));
}

TEST_CASE("csv: columns by header, the label column by name, bad rows refused naming the line and the column") {
  test::scratch_dir dir("csv");
  const auto write = [&](const char* name, const std::string& text) {
    std::ofstream(dir.file(name), std::ios::binary) << text;
    return dir.file(name);
  };
  const std::string good = write("good.csv", "a,class,b\r\n1.5,2,-3\r\n\r\n4e-1,0,5\r\n");
  const dataset d = csv_dataset(good, "class");
  CHECK(shape_of(d.inputs) == shape_t{2, 2});
  CHECK(d.inputs(0, 1) == -3.0f);
  CHECK(d.inputs(1, 0) == 0.4f);
  CHECK(d.labels(0) == 2.0f);
  CHECK(d.num_classes == 3);
  CHECK(contains(error_of([&] { csv_dataset(good); }), good + ": no label column 'label' in the header (line 1): its columns are 'a', 'class', 'b'"));
  const std::string missing = write("missing.csv", "x,label,y\n1,0,2\n3,1\n");
  CHECK(contains(error_of([&] { csv_dataset(missing); }), missing + ": line 3, column 'y': missing value"));
  const std::string empty_field = write("empty_field.csv", "x,label,y\n1,,2\n");
  CHECK(contains(error_of([&] { csv_dataset(empty_field); }), empty_field + ": line 2, column 'label': missing value"));
  const std::string text = write("text.csv", "x,label,y\n1,0,2\n\n3,1,abc\n");
  CHECK(contains(error_of([&] { csv_dataset(text); }), text + ": line 4, column 'y': 'abc' is not a finite number"));
  const std::string nan = write("nan.csv", "x,label,y\n1,0,nan\n");
  CHECK(contains(error_of([&] { csv_dataset(nan); }), nan + ": line 2, column 'y': 'nan' is not a finite number"));
  const std::string label = write("label.csv", "x,label\n1,0\n2,1.5\n");
  CHECK(contains(error_of([&] { csv_dataset(label); }), label + ": line 3, column 'label': label '1.5' is not a class id"));
  const std::string wide = write("wide.csv", "x,label\n1,0\n2,7\n");
  CHECK(contains(error_of([&] { csv_dataset(wide, "label", 5); }), wide + ": line 3, column 'label': label 7 is not below the model's 5 classes"));
  const std::string extra = write("extra.csv", "x,label\n1,0,3\n");
  CHECK(contains(error_of([&] { csv_dataset(extra); }), extra + ": line 2 has 3 fields, the header 2"));
}
