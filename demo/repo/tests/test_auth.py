import unittest

from src import auth


class LoginTest(unittest.TestCase):
    def test_a_good_password_logs_in(self):
        cookie = auth.login("ada", "lovelace")
        self.assertEqual(auth.current_user(cookie), "ada")

    def test_a_bad_password_does_not(self):
        self.assertIsNone(auth.login("ada", "babbage"))


if __name__ == "__main__":
    unittest.main()
